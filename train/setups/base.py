"""What every family's training setup is made of, and the helpers several families share.

A setup reads a `TrainContext` (the run's settings, the loaded target, tokenizer and data) and
returns a `Prepared` (fresh drafter, objective, what to iterate); a `TrainingSetup` row bundles
that with the steps after training and the planner's hooks. Each row lives beside its family's
objective (train/setups/<kind>.py); the table keyed by kind is train/setups/__init__.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Protocol

import torch
from safetensors.torch import load_file

from distill.features.store import FeatureStore, store_dir, write_features
from distill.targets.load import eos_token_ids, padding_id
from heads.vocab import DraftVocab, build_draft_vocab, pick_mask_token, token_counts
from train.data import collate
from train.distributed import launched_processes
from train.errors import PipelineError
from train.on_policy import OnPolicy
from train.sharded_target import whole_embeddings

# why a block drafter refuses trainer.policy=on_policy (PARD, P-EAGLE, DFlash)
BLOCK_DRAFTS_ONLY = "it drafts a whole block in one forward, so its inputs never hold its own drafts"


class Objective(Protocol):
    """batch → (loss, metrics). metrics["positions"] counts the positions the loss averages over
    (the first term's, for a sum of terms): the loop weights each process's loss by it, so N
    processes average over the global batch's positions as one process would."""

    def __call__(
        self, model: torch.nn.Module, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...


class ActivationEstimate(Protocol):
    """The planner's hook: a family's peak activation bytes per GPU → (target extra, drafter).

    tokens: the micro-batch's tokens per GPU; hidden: the target's hidden size; layer: the saved
    tensors of one drafter decoder layer; vocab: the target's vocabulary; act_bytes and
    target_bytes: bytes per value of the drafter's activations and of the target's."""

    def __call__(
        self, cfg: Any, *, tokens: int, hidden: int, layer: int, vocab: int, act_bytes: int, target_bytes: int
    ) -> tuple[float, float]: ...


@dataclass
class TrainContext:
    """What every setup may read: the run's settings and the loaded target, tokenizer and data."""

    cfg: Any  # RunConfig
    target: torch.nn.Module
    tokenizer: Any
    dataset: Any  # the distilled samples (datasets.Dataset)
    paths: Any  # RunPaths
    device: torch.device
    rank: int = 0  # this process's index (on-policy samples differ per process)
    barrier: Callable[[], None] = lambda: None  # waits for every process (accelerator.wait_for_everyone)
    # a continued run's starting weights (train/stages/continuation.py): what it keeps of the earlier run's make-up,
    # such as EAGLE-3's draft vocabulary, which more data would otherwise change
    start_weights: Optional[Path] = None
    start_config: dict = field(default_factory=dict)  # and the config.json of its final drafter


@dataclass
class Prepared:
    drafter: torch.nn.Module  # fresh, to be trained
    objective: Objective
    dataset: Any  # what training iterates over (held-out rows removed)
    select: Optional[Callable] = None  # model → score; the best-scoring checkpoint is kept
    state: dict = field(default_factory=dict)  # handed to `finish` (held-out rows, reports)
    steps: Optional[int] = None  # optimizer steps the family sets (layer skipping's fine-tune); None = trainer's


def nothing_after(drafter, prepared: Prepared, ctx: TrainContext) -> dict:
    """The `finish` of a family with no step after training."""
    return {}


@dataclass(frozen=True)
class TrainingSetup:
    """One family's row: its required hooks, then the settings most rows leave at their defaults."""

    prepare: Callable[[TrainContext], Prepared]
    meta_drafter: Callable[[Any, torch.nn.Module, Any], torch.nn.Module]  # (cfg, meta target, target config) → drafter
    activations: ActivationEstimate  # planner: (cfg, tokens=, hidden=, layer=, …) → (target extra, drafter)
    finish: Callable[[torch.nn.Module, Prepared, TrainContext], dict] = nothing_after  # main process → summary
    unroll: Callable[[Any], int] = lambda drafter_cfg: 1  # drafter forwards per token in training (EAGLE-3's TTT steps)
    # (drafter cfg, target config) → the target layer ids an offline feature store keeps per token ([]: only the
    # lm_head input); None: the family reads no stored features (drafter.features is not its setting)
    feature_ids: Optional[Callable[[Any, Any], list[int]]] = None
    losses: tuple[str, ...] = ("fkl",)  # trainer.loss values the objective implements (others are refused)
    top_k_targets: bool = False  # its fkl reads trainer.kd_top_k (else kd_top_k > 0 is refused)
    # why trainer.policy=on_policy is refused, or None where the objective trains on the drafter's own drafts
    off_policy_only: Optional[str] = "its drafts never feed back into its own inputs"
    on_policy_rollouts: tuple[str, ...] = ("chains",)  # trainer.on_policy_rollout values it implements
    # why the family needs the whole target in every process (trainer.target_sharding is refused), or None
    whole_target_only: Optional[str] = None
    # planner: (run cfg, tokens in a step) → positions whose whole-vocabulary target logits exist at once
    whole_logits: Callable[[Any, int], int] = lambda cfg, tokens: tokens
    # drafter cfg → {setting: distilled samples it holds out of training} (hold_out): checked against the most
    # samples distilling can give before it runs (train/stages/preflight.py)
    held_out: Callable[[Any], dict[str, int]] = lambda drafter_cfg: {}


def hold_out(dataset, count: int, batch_size: int, key: str):
    """(training part, last `count` samples), refusing a split that leaves less than one batch to train on."""
    if count > len(dataset) - batch_size:
        raise PipelineError(
            f"{key}={count} must leave ≥ trainer.batch_size={batch_size} of the {len(dataset)} distilled samples "
            "for training; lower it"
        )
    return dataset.select(range(len(dataset) - count)), dataset.select(range(len(dataset) - count, len(dataset)))


def offline_features(ctx: TrainContext, layer_ids: list[int]) -> Optional[FeatureStore]:
    """drafter.features=offline|vllm: write the features once (resumable) and return their store; online: None."""
    source = ctx.cfg.drafter.features
    if source == "online":
        return None
    root = store_dir(ctx.paths.data, layer_ids, ctx.cfg.target.name_or_path, source)
    ctx.barrier()  # every process sees the same finished shards, so all run the same forwards
    if source == "offline":
        batch = ctx.cfg.trainer.batch_size
        write_features(ctx.target, ctx.dataset, root, layer_ids, batch_size=batch, save=ctx.rank == 0)
    elif not (root / "manifest.json").exists() and launched_processes() > 1:  # vLLM needs the processes' GPUs
        raise PipelineError(
            "drafter.features=vllm: the features are not written yet, and vLLM cannot run beside the "
            "training processes; run `python -m train … stages=[distill]` alone first (it writes them), "
            "then launch the training"
        )
    elif ctx.rank == 0:
        vllm_store(ctx.cfg, ctx.paths.data, ctx.target, ctx.dataset, layer_ids)
    ctx.barrier()  # written before any process reads them
    return FeatureStore(root)


def vllm_store(cfg, data_dir, heads: torch.nn.Module, dataset, layer_ids: list[int]) -> Path:
    """The feature store vLLM writes for `dataset` (resumable; the distill stage writes it when it can)."""
    from distill.features.vllm import write_vllm_features

    root = store_dir(data_dir, layer_ids, cfg.target.name_or_path, "vllm")
    data = cfg.data
    write_vllm_features(
        cfg.target, heads, dataset, root, layer_ids,
        tensor_parallel_size=data.tensor_parallel_size, memory_fraction=data.memory_fraction,
    )  # fmt: skip
    return root


def sim_tau_selector(objective, dataset, start: int, ctx: TrainContext) -> Callable:
    """model → mean simulated τ of the objective over dataset rows start… (fixed batches)."""
    trainer, rows = ctx.cfg.trainer, list(range(start, len(dataset)))
    batches = []
    for i in range(0, len(rows), trainer.batch_size):
        chunk = rows[i : i + trainer.batch_size]
        part = dataset[chunk]
        batch = collate(part["input_ids"], part["loss_mask"], trainer.max_seq_len, padding_id(ctx.tokenizer))
        batches.append(batch | {"rows": torch.tensor(chunk)})

    def select(model) -> float:
        scores = [objective(model, {k: v.to(ctx.device) for k, v in b.items()})[1]["sim_tau"] for b in batches]
        return float(torch.stack(scores).mean())

    return select


def logits_bytes(tokens: int, vocab: int) -> float:
    return 3 * tokens * vocab * 4  # fp32 logits, log-softmax and its gradient


def on_policy(ctx: TrainContext) -> Optional[OnPolicy]:
    """The on-policy sampler trainer.policy asks for, or None (off-policy)."""
    trainer = ctx.cfg.trainer
    if trainer.policy != "on_policy":
        return None
    return OnPolicy(
        trainer.on_policy_fraction, trainer.on_policy_temperature, trainer.seed, ctx.rank, trainer.on_policy_rollout
    )


def mask_token(ctx: TrainContext, key: str, vocab_rows: Optional[int] = None) -> int:
    """drafter.<key>, or an id the distilled data never contains (heads.vocab.pick_mask_token) among the first
    vocab_rows ids (default: the target's input embedding rows)."""
    setting = getattr(ctx.cfg.drafter, key)
    if setting is not None:
        return setting
    kept = ctx.start_config.get(key, (ctx.start_config.get("arch") or {}).get(key))
    if kept is not None:  # a continued run's embedding row was trained for this id: more data must not move it
        return kept
    if vocab_rows is None:
        with whole_embeddings(ctx.target):
            vocab_rows = ctx.target.get_input_embeddings().weight.shape[0]
    keep = {padding_id(ctx.tokenizer), *eos_token_ids(ctx.target, ctx.tokenizer)}
    token = pick_mask_token(
        ctx.dataset["input_ids"], vocab_rows, ctx.tokenizer.all_special_ids, exclude=keep, setting=f"drafter.{key}"
    )
    print(f"mask token: id {token} ({ctx.tokenizer.convert_ids_to_tokens(token)!r}), never seen in the distilled data")
    return token


def draft_vocab(ctx: TrainContext):
    """EAGLE-3's reduced vocabulary (heads.vocab.DraftVocab) from the distilled answers, and its coverage report."""
    with whole_embeddings(ctx.target):
        vocab_rows = ctx.target.get_output_embeddings().weight.shape[0]
    counts = token_counts(ctx.dataset["input_ids"], ctx.dataset["loss_mask"], vocab_rows)
    if ctx.start_weights is not None:  # a continued run keeps the one its weights were trained over
        vocab = DraftVocab.from_d2t(load_file(str(ctx.start_weights))["d2t"])
        covered, total = counts[vocab.draft_to_target].sum().item(), counts.sum().item()
        report = {"draft_vocab_size": vocab.size, "coverage": covered / total if total else 1.0}
    else:
        vocab, report = build_draft_vocab(
            counts, ctx.cfg.drafter.draft_vocab_size, always=eos_token_ids(ctx.target, ctx.tokenizer)
        )
    print(f"draft vocabulary: {vocab.size} tokens cover {report['coverage']:.1%} of the distilled answers' tokens")
    return vocab, report


def held_out_selection(ctx: TrainContext, objective) -> tuple[Any, Optional[Callable]]:
    """(training rows, sim_τ selector over the last drafter.select_samples rows, or None when 0)."""
    dataset, trainer = ctx.dataset, ctx.cfg.trainer
    if not ctx.cfg.drafter.select_samples:
        return dataset, None
    # the last samples score each checkpoint; training never sees them
    train_part, _ = hold_out(dataset, ctx.cfg.drafter.select_samples, trainer.batch_size, "drafter.select_samples")
    return train_part, sim_tau_selector(objective, dataset, len(train_part), ctx)  # rows keep their index (offline)


def sample_anchors(candidates: torch.Tensor, count: int, generator=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Up to `count` distinct random columns per row among its candidates (torch's RNG or `generator`).

    The parallel drafters (PARD, P-EAGLE, DFlash) start a masked block at each anchor and train every
    anchor of a batch in the same forward.

    Args:
        candidates: (B, N) bool, which columns may be anchors.
    Returns:
        anchors (B, A) column indices, A = min(count, N), and (B, A) bool: a real anchor (a row with
        fewer candidates pads with non-candidates, marked False).
    """
    count = max(min(count, candidates.shape[1]), 0)
    score = torch.rand(candidates.shape, device=candidates.device, generator=generator)
    top = score.masked_fill(~candidates, -1.0).topk(count, dim=1)
    return top.indices, top.values >= 0


LOGITS_CHUNK = 1024  # positions whose whole-vocabulary logits exist at once: 1 GiB in fp32 at a 262k vocabulary


@torch.no_grad()
def stored_argmax(target: torch.nn.Module, last_hidden: torch.Tensor) -> torch.Tensor:
    """The target's argmax over its whole vocabulary at each stored lm_head input (N, H) → (N,), its logits made
    LOGITS_CHUNK positions at a time: a whole batch's at once is B·T·V floats (6.7 GB for 16 × 400 tokens of a
    262k-vocabulary target, Gemma 3's). The lm_head is gathered once, also for N = 0 (a sharded target's
    processes gather it together)."""
    lm_head = target.get_output_embeddings()
    with whole_embeddings(target):
        parts = [lm_head(chunk.to(lm_head.weight.dtype)).argmax(-1) for chunk in last_hidden.split(LOGITS_CHUNK)]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long, device=last_hidden.device)


@torch.no_grad()
def stored_logits(target: torch.nn.Module, last_hidden: torch.Tensor, rows: Optional[torch.Tensor] = None):
    """The target's logits from stored lm_head inputs (offline features): only its lm_head runs, gathered
    first where the target is sharded; `rows` (token ids) keeps those of its rows alone (…, len(rows))."""
    lm_head = target.get_output_embeddings()
    with whole_embeddings(target):
        if rows is None:
            return lm_head(last_hidden.to(lm_head.weight.dtype))
        bias = None if lm_head.bias is None else lm_head.bias[rows]
        return torch.nn.functional.linear(last_hidden.to(lm_head.weight.dtype), lm_head.weight[rows], bias)
