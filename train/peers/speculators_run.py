"""drafthub's EAGLE-3 settings as `speculators train` flags, and its run on this machine's device.

Matched to drafthub's EAGLE-3 (heads/eagle.py): one decoder layer over the same target layers, the same draft
vocabulary (its d2t/t2d files in the data directory), the same TTT depth and step weights, AdamW with the same
learning-rate schedule and weight decay. speculators' optional norms (before fc, before the residual, after the
output) and its sliding-window layer are switched off: drafthub's EAGLE-3 has none of them. Its own choices stay and
are named by the benchmark: soft targets through the target's frozen lm_head rows, batches packed to total_seq_len
tokens, a validation split by row index.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PeerSettings:
    """What every trainer of the benchmark is given alike."""

    layer_ids: list[int]  # the target layers the drafter reads (heads/target_features.py ids)
    draft_vocab_size: int
    ttt_steps: int
    step_decay: float  # step j's loss weighed step_decay ** j
    lr: float  # peak, reached after warmup_steps of linear warm-up, then cosine decay to 0 at max_steps
    warmup_steps: int
    weight_decay: float
    max_steps: int
    tokens_per_step: int  # speculators packs each step to this many tokens
    seed: int = 0


def speculators_args(
    data: Path, verifier: str | Path, save: Path, s: PeerSettings, train_ratio: float, epochs: int = 1
) -> list[str]:
    """`speculators train` flags for `s` over the data written by write_speculators_data; epochs: enough for
    s.max_steps (epochs_for)."""
    return [
        "--speculator-type", "eagle3",
        "--verifier-name-or-path", str(verifier),
        "--data-path", str(data),
        "--on-missing", "raise",  # never ask a vLLM server for a missing feature file
        "--train-data-ratio", str(train_ratio),
        "--target-layer-ids", *map(str, s.layer_ids),
        "--draft-vocab-size", str(s.draft_vocab_size),  # its maps: d2t-<D>.npy, t2d-<D>.npy beside the data
        "--num-layers", "1",
        "--no-norm-before-residual", "--no-norm-before-fc", "--no-norm-output",
        "--full-attention-indices", "0",  # no sliding window
        "--mask-token-id", "0",  # EAGLE-3 masks nothing; without it the tokenizer is read to choose one
        "--ttt-steps", str(s.ttt_steps),
        "--ttt-step-loss-decay", str(s.step_decay),
        "--optimizer", "adamw",
        "--lr", str(s.lr),
        "--weight-decay", str(s.weight_decay),
        "--scheduler-type", "cosine",  # drafthub's: linear warm-up, cosine to 0 (speculators' default: linear)
        "--scheduler-warmup-steps", str(s.warmup_steps),
        "--epochs", str(epochs),  # its --max-steps ends an epoch only: no more epochs than reach it (epochs_for)
        "--max-steps", str(s.max_steps),
        "--total-seq-len", str(s.tokens_per_step),
        "--draft-attn-impl", "sdpa",
        "--loss-implementation", "eager",  # the fused loss needs triton
        "--num-workers", "0",
        "--hidden-states-dtype", "float32",
        "--seed", str(s.seed),
        "--save-path", str(save),
        "--no-resume-from-checkpoint",
    ]  # fmt: skip


def epochs_for(lengths: list[int], tokens_per_step: int, max_steps: int, seed: int) -> int:
    """The fewest epochs of speculators' own packing (its sampler, reshuffled each epoch) that hold max_steps steps.

    speculators 0.9.0 ends an epoch at --max-steps but not its epoch loop (trainer.py: run_training): each later epoch
    would run one step more. With exactly this many epochs the last one ends at max_steps."""
    from speculators.train.distributed_batch_sampler import MultipackDistributedBatchSamplerV2

    sampler = MultipackDistributedBatchSamplerV2(tokens_per_step, lengths, num_replicas=1, rank=0, seed=seed)
    epochs, steps = 0, 0
    while steps < max_steps:
        sampler.set_epoch(epochs)
        steps, epochs = steps + len(sampler), epochs + 1
    return epochs


def run_speculators(args: list[str], log: Path) -> Path:
    """Train in a child process (train.peers.speculators_cpu), its output in `log`; the export it saved last."""
    with open(log, "w") as out:
        done = subprocess.run([sys.executable, "-m", "train.peers.speculators_cpu", *args], stdout=out, stderr=out)
    if done.returncode != 0:
        tail = log.read_text()[-2000:]
        raise RuntimeError(f"speculators train failed ({done.returncode}); its log {log} ends:\n{tail}")
    save = Path(args[args.index("--save-path") + 1])
    saved = sorted((p for p in save.iterdir() if p.is_dir() and (p / "config.json").exists()), key=_epoch)
    if not saved:
        raise RuntimeError(f"speculators train saved no checkpoint in {save}; see {log}")
    return saved[-1]


def _epoch(path: Path) -> tuple[int, str]:
    return (int(path.name), "") if path.name.isdigit() else (-1, path.name)
