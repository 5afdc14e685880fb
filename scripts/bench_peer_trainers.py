"""Is drafthub's trainer worth it? The same EAGLE-3 trained by drafthub, speculators 0.9.0 and NVIDIA ModelOpt
0.47.0 on the same data, measured by one engine on the same held-out prompts (issue 72).

    python scripts/bench_peer_trainers.py --run runs/smollm2_main/<ts> --out runs/bench_peer_trainers

--run is a finished main job (or `recipe=smollm2` run): its distilled data, its EAGLE-3's resolved settings and the
held-out prompts its eval decoded. Both trainers get the EAGLE-3's training rows (its held-out rows are speculators'
validation split, as they are drafthub's checkpoint selection), the same bf16 target features, draft vocabulary, TTT
depth and step weights, AdamW with the same schedule, as many optimizer steps and as many tokens a step (drafthub
and ModelOpt: batch_size sequences, ModelOpt's in drafthub's order; speculators packs each step to their mean token
count). drafthub retrains here, in `<out>/drafthub` (`python -m train recipe=<the run's>` on the run's data and
features), so the trainers are timed on the same machine in the same hour; a rerun reuses each trainer's finished
run (its export and its recorded seconds) unless --retrain.
The exports are then measured together (one interleaved run against one plain baseline) at the run's eval settings.
Prints the machine line, a table and one JSON line: per trainer, held-out τ with its 95 % interval, acceptance per
draft position, the speed-up, training wall time and tokens a second, and every setting that could not be matched.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from distill.config import TargetConfig
from distill.features.store import FeatureStore, store_dir
from distill.stage.shards import load_distilled
from distill.targets import resolve_target
from distill.targets.load import eos_token_ids, load_target, load_tokenizer, padding_id
from eval import machine
from eval.config import EvalConfig
from eval.measure_export import measure_exports
from eval.report import read_samples
from heads.formats.speculators import load_speculators
from heads.vocab import DraftVocab
from train.data import BatchOrder
from train.peers.runs import evaluated_run, train_on_run_data
from train.peers.speculators_data import write_speculators_data
from train.peers.speculators_run import PeerSettings, epochs_for, run_speculators, speculators_args

LABELS = {"speculators": "speculators 0.9.0", "modelopt": "ModelOpt 0.47.0"}
MODELOPT_INSTALL = 'pip install --no-deps nvidia-modelopt==0.47.0 "pulp<4"'
UNMATCHED = {  # what differs between the trainers however they are set, and why
    "speculators": [
        "batches: packed to tokens_per_step tokens (documents kept apart by its attention mask), not batch_size rows",
        "it saves a checkpoint and validates on the held-out rows each epoch (drafthub scores them at each save)",
        "checkpoint: saved in bf16 (drafthub exports float32)",
        "weights: its last step's (drafthub's selection may keep an earlier checkpoint by held-out sim-τ)",
        "AdamW betas: its (0.9, 0.999), no flag sets them (drafthub's: 0.9, 0.95)",
        "draft lm_head: frozen, the target's rows (drafthub starts from those rows and trains them)",
        "loss positions: a token's distribution counts when the token before it is an answer token (drafthub: when "
        "the token itself is)",
    ],
    "modelopt": [
        "draft lm_head: a fresh trainable layer (drafthub starts from the target's rows)",
        "its first layer norms the features twice in training (input_layernorm, then hidden_norm), once when vLLM "
        "or drafthub serves the export: ModelOpt's own train/serve mismatch, measured as served",
        "loss positions: a token's distribution counts when the token before it is an answer token (drafthub: when "
        "the token itself is)",
        "weights: its last step's (drafthub's selection may keep an earlier checkpoint by held-out sim-τ)",
        "batches: drafthub's rows, padded to the longest training row (ModelOpt builds its training-time-test masks "
        "once, for one length; its own driver pads every row to training_seq_len)",
    ],
}

KIND = "eagle3"  # the family this benchmark compares


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", type=Path, required=True, help="a finished main job's (or recipe=smollm2's) run directory")
    p.add_argument("--out", type=Path, default=Path("runs/bench_peer_trainers"))
    p.add_argument("--max-steps", type=int, default=None, help="optimizer steps (default: the run's)")
    p.add_argument("--num-prompts", type=int, default=None, help="held-out prompts measured (default: the run's)")
    p.add_argument("--peers", nargs="*", default=["speculators", "modelopt"], choices=["speculators", "modelopt"])
    p.add_argument("--retrain", action="store_true", help="train again (removing the earlier run in --out)")
    return p.parse_args(argv)


def train_drafthub(recipe: str, data: Path, out: Path, max_steps: int) -> tuple[Path, dict]:
    """`python -m train recipe=<the run's>` again, in out/ on the run's data and features (linked): the export and
    the training summary."""
    summary = train_on_run_data(data, recipe, out, [f"trainer.max_steps={max_steps}"])
    return out / "drafter", summary


def settings_of(cfg, rows: list[dict], max_steps: int, layer_ids: list[int]) -> PeerSettings:
    """What both trainers are given: the run's EAGLE-3 settings (layer_ids: as its export resolved them), tokens a
    step = batch_size mean-length rows."""
    mean_tokens = sum(len(r["input_ids"]) for r in rows) / len(rows)
    return PeerSettings(
        layer_ids=layer_ids,
        draft_vocab_size=cfg.drafter.draft_vocab_size,
        ttt_steps=cfg.drafter.ttt_steps,
        step_decay=cfg.drafter.step_decay,
        lr=cfg.trainer.lr,
        warmup_steps=cfg.trainer.warmup_steps,
        weight_decay=cfg.trainer.weight_decay,
        max_steps=max_steps,
        tokens_per_step=round(mean_tokens * cfg.trainer.batch_size),
        seed=cfg.trainer.seed,
    )


def row(name: str, report: dict, seconds: float, tokens: int) -> dict:
    spread = report["tau_spread"]
    return {
        "trainer": LABELS.get(name, name),
        "tau": round(report["tau"], 4),
        "tau_interval": [round(spread["low"], 4), round(spread["high"], 4)],
        "per_position_acceptance": [round(a, 4) for a in report["per_position_acceptance"]],
        "speedup": round(report["speedup"], 4),
        "lossless": report["lossless"],
        "train_seconds": round(seconds, 1),
        "train_tokens": tokens,
        "train_tokens_per_second": round(tokens / seconds, 1),
        "unmatched": UNMATCHED.get(name, []),
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| trainer | τ (95 %) | acceptance per position | speed-up | training | tokens/s |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        low, high = r["tau_interval"]
        acc = ", ".join(f"{a:.2f}" for a in r["per_position_acceptance"])
        lines.append(
            f"| {r['trainer']} | {r['tau']:.3f} ({low:.3f}–{high:.3f}) | {acc} | {r['speedup']:.2f}× | "
            f"{r['train_seconds'] / 60:.1f} min, {r['train_tokens']:,} tokens | {r['train_tokens_per_second']:.0f} |"
        )
    return "\n".join(lines)


def trained(out: Path, retrain: bool, train) -> tuple[Path, float]:
    """(export, training seconds) of one trainer: `train()` run and recorded in out/bench_train.json, or the record
    of an earlier run of this benchmark whose export is still there (unless retrain)."""
    record = out / "bench_train.json"
    if not retrain and record.exists():
        saved = json.loads(record.read_text())
        if Path(saved["export"]).is_dir():
            print(f"[bench] reusing {out.name}'s run of {saved['when']} ({saved['seconds']:.0f} s of training)")
            return Path(saved["export"]), saved["seconds"]
    if retrain and out.exists():
        shutil.rmtree(out)  # a resumed run would not train again
    out.mkdir(parents=True, exist_ok=True)
    export, seconds = train()
    when = time.strftime("%Y-%m-%d %H:%M")
    record.write_text(json.dumps({"export": str(export), "seconds": seconds, "when": when}))
    return export, seconds


def modelopt_missing() -> str | None:
    try:
        import modelopt.torch.speculative  # noqa: F401
    except ImportError as e:
        return f"ModelOpt is not installed ({e}); {MODELOPT_INSTALL}"
    return None


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    machine.announce()
    eagle = evaluated_run(args.run.resolve(), KIND)
    cfg = OmegaConf.load(eagle / ".hydra" / "config.yaml")
    steps = args.max_steps or cfg.trainer.max_steps
    data = (eagle / "data").resolve()
    dataset = load_distilled(data)
    rows = [{"input_ids": i, "loss_mask": m} for i, m in zip(dataset["input_ids"], dataset["loss_mask"])]
    held_out = cfg.drafter.select_samples
    args.out.mkdir(parents=True, exist_ok=True)

    def drafthub():
        export, summary = train_drafthub(cfg.recipe_name, data, args.out / "drafthub", steps)
        return export, summary["seconds"]

    exports, seconds = {}, {}
    exports["drafthub"], seconds["drafthub"] = trained(args.out / "drafthub", args.retrain, drafthub)
    layer_ids = json.loads((exports["drafthub"] / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"]
    settings = settings_of(cfg, rows[: len(rows) - held_out], steps, layer_ids)
    target_cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TargetConfig), cfg.target))
    tokenizer, target = load_tokenizer(target_cfg), load_target(target_cfg, torch.device("cpu"))
    vocab = DraftVocab.from_d2t(load_speculators(exports["drafthub"], target).d2t)  # drafthub's own, handed on
    verifier = Path(resolve_target(target_cfg))  # the directory transformers loads (a GGUF's dequantized copy)
    peers = {
        "speculators": lambda: speculators_peer(args, rows, held_out, settings, vocab, target, verifier),
        "modelopt": lambda: modelopt_peer(args, cfg, dataset, held_out, settings, vocab, tokenizer, verifier, exports),
    }
    for name in args.peers:
        if name == "modelopt" and (why := modelopt_missing()):
            print(f"[bench] skipping ModelOpt: {why}")
            continue
        exports[name], seconds[name] = trained(args.out / name, args.retrain, peers[name])

    eval_cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(EvalConfig), cfg.eval))
    prompts = [s["prompt_ids"] for s in read_samples(eagle / "eval" / "eval_samples.jsonl")][: args.num_prompts]
    eos = eos_token_ids(target, tokenizer)
    reports = measure_exports(target, exports, prompts, eval_cfg, vocab_size=len(tokenizer), eos_ids=eos)
    tokens = settings.tokens_per_step * steps
    rows_out = [row(name, reports[name], seconds[name], tokens) for name in exports]
    result = {"run": str(args.run), "settings": settings.__dict__, "trainers": rows_out}
    print(table(rows_out))
    print(json.dumps(machine.with_machine(result)))
    return result


def speculators_peer(args, rows, held_out, settings, vocab, target, verifier) -> tuple[Path, float]:
    """speculators' own trainer on the rows, features and vocabulary written in its offline layout."""
    peer_data = args.out / "speculators_data"
    if not (peer_data / "drafthub_peer.json").exists():
        write_speculators_data(target, rows, peer_data, settings.layer_ids, vocab)
    ratio = (len(rows) - held_out + 0.5) / len(rows)  # speculators' split by row index: the same training rows
    train_lengths = [len(r["input_ids"]) for r in rows[: len(rows) - held_out]]
    epochs = epochs_for(train_lengths, settings.tokens_per_step, settings.max_steps, settings.seed)
    spec_args = speculators_args(peer_data, verifier, args.out / "speculators", settings, ratio, epochs)
    t0 = time.perf_counter()
    export = run_speculators(spec_args, args.out / "speculators.log")
    return export, time.perf_counter() - t0


def modelopt_peer(args, cfg, dataset, held_out, settings, vocab, tokenizer, verifier, exports) -> tuple[Path, float]:
    """ModelOpt's EAGLE-3 on drafthub's batches and feature store (train/peers/modelopt_run.py), its export put in
    the speculators layout beside drafthub's."""
    from train.peers.modelopt_run import as_speculators, train_modelopt

    data = args.out / "drafthub" / "data"
    store = FeatureStore(store_dir(data, settings.layer_ids, cfg.target.name_or_path))
    train_rows = dataset.select(range(len(dataset) - held_out))
    order = BatchOrder(
        train_rows, cfg.trainer.batch_size, cfg.trainer.max_seq_len, padding_id(tokenizer), seed=settings.seed
    )
    out = args.out / "modelopt"
    export, seconds = train_modelopt(verifier, store, order, settings, vocab.d2t(), out)
    return as_speculators(export, exports["drafthub"], out / "speculators_layout"), seconds


if __name__ == "__main__":
    main()
