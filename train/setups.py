"""The training-setup table: how each trainable family is built, trained and finished.

A row gives the objective the shared loop optimises (batch → loss and metrics, via `prepare`),
the steps after training (Medusa's tree calibration, EAGLE-3's best-checkpoint pick), and the
planner's hooks (the drafter on the meta device, its activation estimate). Training-free
families have no row: the pipeline skips their train stage (heads.families: trainable=False).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, Optional

import torch

from distill.feature_store import FeatureStore, store_dir, write_features
from distill.target import eos_token_ids
from heads.draft_lm import DraftLM
from heads.eagle import Eagle3Drafter
from heads.eagle1 import Eagle1Drafter
from heads.medusa import MedusaHeads
from heads.vocab import build_draft_vocab, token_counts
from train.calibration import calibrate_medusa
from train.data import collate
from train.errors import PipelineError
from train.loop import best_weights
from train.objectives import DraftLMDistillation, Eagle1Distillation, Eagle3TrainingTimeTest, MedusaDistillation


@dataclass
class TrainContext:
    """What every setup may read: the run's settings and the loaded target, tokenizer and data."""

    cfg: Any  # RunConfig
    target: torch.nn.Module
    tokenizer: Any
    dataset: Any  # the distilled samples (datasets.Dataset)
    paths: Any  # RunPaths
    device: torch.device


@dataclass
class Prepared:
    drafter: torch.nn.Module  # fresh, to be trained
    objective: Callable  # train.objectives.Objective
    dataset: Any  # what training iterates over (held-out rows removed)
    select: Optional[Callable] = None  # model → score; the best-scoring checkpoint is kept
    state: dict = field(default_factory=dict)  # handed to `finish` (held-out rows, reports)


@dataclass(frozen=True)
class TrainingSetup:
    prepare: Callable[[TrainContext], Prepared]
    finish: Callable[[torch.nn.Module, Prepared, TrainContext], dict]  # main process, after training → summary entries
    meta_drafter: Callable[[Any, torch.nn.Module, Any], torch.nn.Module]  # (cfg, meta target, target config) → drafter
    activations: Callable[
        ..., tuple[float, float]
    ]  # planner: (cfg, tokens=, layer=, logits=, …) → (target extra, drafter)
    unroll: Callable[[Any], int] = lambda drafter_cfg: 1  # drafter forwards per token in training (EAGLE-3's TTT steps)
    feature_layers: Optional[Callable[[Any], int]] = None  # target layers an offline feature store keeps per token


def hold_out(dataset, count: int, batch_size: int, key: str):
    """(training part, last `count` samples), refusing a split that leaves less than one batch to train on."""
    if count > len(dataset) - batch_size:
        raise PipelineError(
            f"{key}={count} must leave ≥ trainer.batch_size={batch_size} of the {len(dataset)} distilled samples "
            "for training; lower it"
        )
    return dataset.select(range(len(dataset) - count)), dataset.select(range(len(dataset) - count, len(dataset)))


def offline_features(ctx: TrainContext, layer_ids: list[int]) -> Optional[FeatureStore]:
    """drafter.features=offline: write the features once (resumable) and return their store; else None."""
    if ctx.cfg.drafter.features != "offline":
        return None
    root = store_dir(ctx.paths.data, layer_ids, ctx.cfg.target.name_or_path)
    write_features(ctx.target, ctx.dataset, root, layer_ids, batch_size=ctx.cfg.trainer.batch_size)
    return FeatureStore(root)


def sim_tau_selector(objective, dataset, start: int, ctx: TrainContext) -> Callable:
    """model → mean simulated τ of the objective over dataset rows start… (fixed batches)."""
    trainer, rows = ctx.cfg.trainer, list(range(start, len(dataset)))
    batches = []
    for i in range(0, len(rows), trainer.batch_size):
        chunk = rows[i : i + trainer.batch_size]
        part = dataset[chunk]
        batch = collate(part["input_ids"], part["loss_mask"], trainer.max_seq_len, ctx.tokenizer.pad_token_id)
        batches.append(batch | {"rows": torch.tensor(chunk)})

    def select(model) -> float:
        scores = [objective(model, {k: v.to(ctx.device) for k, v in b.items()})[1]["sim_tau"] for b in batches]
        return float(torch.stack(scores).mean())

    return select


def _logits_bytes(tokens: int, vocab: int) -> float:
    return 3 * tokens * vocab * 4  # fp32 logits, log-softmax and its gradient


# --- draft LM ---------------------------------------------------------------------------------


def _prepare_draft_lm(ctx: TrainContext) -> Prepared:
    cfg, trainer = ctx.cfg, ctx.cfg.trainer
    drafter = DraftLM.from_config(cfg.drafter, ctx.target.config, ctx.tokenizer, cfg.target.trust_remote_code)
    objective = DraftLMDistillation(
        ctx.target, trainer.loss, len(ctx.tokenizer), jsd_beta=trainer.jsd_beta, temperature=trainer.kd_temperature
    )
    return Prepared(drafter, objective, ctx.dataset)


def _meta_draft_lm(cfg, target, config) -> torch.nn.Module:
    if cfg.drafter.init:  # a pretrained draft LM: plan from its config.json likewise
        from transformers import AutoModelForCausalLM

        from train.planner import target_config

        drafter = AutoModelForCausalLM.from_config(target_config(cfg.drafter.init, cfg.target.trust_remote_code))
    else:
        drafter = DraftLM.from_config(cfg.drafter, config, SimpleNamespace(pad_token_id=config.pad_token_id)).model
    if cfg.drafter.lora.enabled:
        from peft import LoraConfig, get_peft_model

        lora = cfg.drafter.lora
        drafter = get_peft_model(
            drafter,
            LoraConfig(
                r=lora.r, lora_alpha=lora.alpha, target_modules=list(lora.target_modules), task_type="CAUSAL_LM"
            ),
        )
    return drafter


def _activations_draft_lm(cfg, *, tokens, hidden, layer, vocab, act_bytes, target_bytes) -> tuple[float, float]:
    return 0.0, cfg.drafter.num_hidden_layers * layer + _logits_bytes(tokens, vocab)


# --- Medusa -----------------------------------------------------------------------------------


def _prepare_medusa(ctx: TrainContext) -> Prepared:
    cfg, trainer = ctx.cfg, ctx.cfg.trainer
    dataset, holdout = hold_out(ctx.dataset, cfg.drafter.holdout_samples, trainer.batch_size, "drafter.holdout_samples")
    objective = MedusaDistillation(
        ctx.target,
        cfg.drafter.num_heads,
        trainer.loss,
        len(ctx.tokenizer),
        decay=cfg.drafter.loss_decay,
        jsd_beta=trainer.jsd_beta,
        temperature=trainer.kd_temperature,
    )
    return Prepared(MedusaHeads.from_target(cfg.drafter, ctx.target), objective, dataset, state={"holdout": holdout})


def _finish_medusa(heads: MedusaHeads, prepared: Prepared, ctx: TrainContext) -> dict:
    """The token tree comes from accuracy on samples training never saw."""
    d, trainer = ctx.cfg.drafter, ctx.cfg.trainer
    calibration = calibrate_medusa(
        heads.eval(),
        ctx.target,
        prepared.state["holdout"],
        tree_topk=d.tree_topk,
        tree_nodes=d.tree_nodes,
        vocab_size=len(ctx.tokenizer),
        pad_token_id=ctx.tokenizer.pad_token_id,
        batch_size=trainer.batch_size,
        max_seq_len=trainer.max_seq_len,
    )
    return {"medusa": calibration}


def _activations_medusa(cfg, *, tokens, hidden, layer, vocab, act_bytes, target_bytes) -> tuple[float, float]:
    d = cfg.drafter
    return 0.0, d.num_heads * (2 * d.num_layers * tokens * hidden * act_bytes + _logits_bytes(tokens, vocab))


# --- EAGLE-3 ----------------------------------------------------------------------------------


def _prepare_eagle3(ctx: TrainContext) -> Prepared:
    cfg, trainer, dataset = ctx.cfg, ctx.cfg.trainer, ctx.dataset
    vocab_rows = ctx.target.get_output_embeddings().weight.shape[0]
    counts = token_counts(dataset["input_ids"], dataset["loss_mask"], vocab_rows)
    vocab, report = build_draft_vocab(
        counts, cfg.drafter.draft_vocab_size, always=eos_token_ids(ctx.target, ctx.tokenizer)
    )
    print(f"draft vocabulary: {vocab.size} tokens cover {report['coverage']:.1%} of the distilled answers' tokens")
    drafter = Eagle3Drafter.from_target(cfg.drafter, ctx.target, vocab)
    store = offline_features(ctx, drafter.arch.layer_ids)
    objective = Eagle3TrainingTimeTest(
        ctx.target,
        drafter.arch.layer_ids,
        vocab.draft_to_target,
        steps=cfg.drafter.ttt_steps,
        decay=cfg.drafter.step_decay,
        store=store,
    )
    select = None
    if cfg.drafter.select_samples:  # the last samples score each checkpoint; training never sees them
        train_part, _ = hold_out(dataset, cfg.drafter.select_samples, trainer.batch_size, "drafter.select_samples")
        select = sim_tau_selector(objective, dataset, len(train_part), ctx)  # rows keep their index (offline lookups)
        dataset = train_part
    return Prepared(drafter, objective, dataset, select=select, state={"draft_vocab": report})


def _finish_eagle3(drafter: Eagle3Drafter, prepared: Prepared, ctx: TrainContext) -> dict:
    summary = {"draft_vocab": prepared.state["draft_vocab"]}
    best = best_weights(ctx.paths.checkpoints) if prepared.select else None
    if best:  # the checkpoint with the best simulated τ on held-out samples, not merely the last
        drafter.load_state_dict(best[0])
        summary["selected_checkpoint"] = best[1]
    return summary


def _meta_eagle3(cfg, target, config) -> torch.nn.Module:
    vocab, _ = build_draft_vocab(torch.zeros(config.vocab_size, device="cpu"), cfg.drafter.draft_vocab_size)
    return Eagle3Drafter.from_target(cfg.drafter, target, vocab)


def _activations_eagle3(cfg, *, tokens, hidden, layer, vocab, act_bytes, target_bytes) -> tuple[float, float]:
    d = cfg.drafter
    target = tokens * 3 * hidden * target_bytes  # the three captured layers
    return target, d.ttt_steps * (
        2 * layer + _logits_bytes(tokens, min(d.draft_vocab_size, vocab))
    )  # attention reads 2H


# --- EAGLE-1 ----------------------------------------------------------------------------------


def _prepare_eagle1(ctx: TrainContext) -> Prepared:
    d = ctx.cfg.drafter
    store = offline_features(ctx, [])  # only the lm_head inputs
    objective = Eagle1Distillation(
        ctx.target, len(ctx.tokenizer), noise=d.feature_noise, cls_weight=d.cls_weight, store=store
    )
    return Prepared(Eagle1Drafter.from_target(d, ctx.target), objective, ctx.dataset)


def _activations_eagle1(cfg, *, tokens, hidden, layer, vocab, act_bytes, target_bytes) -> tuple[float, float]:
    return 0.0, 2 * layer + _logits_bytes(tokens, vocab)


def _nothing_after(drafter, prepared: Prepared, ctx: TrainContext) -> dict:
    return {}


SETUPS: dict[str, TrainingSetup] = {
    "draft_lm": TrainingSetup(_prepare_draft_lm, _nothing_after, _meta_draft_lm, _activations_draft_lm),
    "medusa": TrainingSetup(
        _prepare_medusa,
        _finish_medusa,
        lambda cfg, target, config: MedusaHeads.from_target(cfg.drafter, target),
        _activations_medusa,
    ),
    "eagle3": TrainingSetup(
        _prepare_eagle3,
        _finish_eagle3,
        _meta_eagle3,
        _activations_eagle3,
        unroll=lambda d: d.ttt_steps,
        feature_layers=lambda d: 3,
    ),
    "eagle1": TrainingSetup(
        _prepare_eagle1,
        _nothing_after,
        lambda cfg, target, config: Eagle1Drafter.from_target(cfg.drafter, target),
        _activations_eagle1,
        feature_layers=lambda d: 0,
    ),
}


def training_setup(kind: str) -> TrainingSetup:
    try:
        return SETUPS[kind]
    except KeyError:
        raise PipelineError(
            f"drafter.kind={kind!r} is trainable but has no entry in the training-setup table "
            "(train/setups.py SETUPS); "
            f"known kinds: {sorted(SETUPS)}"
        ) from None
