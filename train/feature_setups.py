"""Training setups of the drafters that read the frozen target's features: Medusa, EAGLE-3, P-EAGLE, EAGLE-1, DFlash.

Each row (`MEDUSA`, `EAGLE3`, `PEAGLE`, `EAGLE1`, `DFLASH`) is listed in the table in train/setups.py.
"""

from __future__ import annotations

import torch

from distill.target import padding_id
from heads.dflash import DFlashDrafter
from heads.eagle import Eagle3Drafter, eagle3_layer_ids
from heads.eagle1 import Eagle1Drafter
from heads.medusa import MedusaHeads
from heads.peagle import PEagleDrafter
from heads.vocab import build_draft_vocab
from train.calibration import calibrate_medusa
from train.checkpoint import best_weights
from train.dflash_objective import DFlashDenoising
from train.losses import KD_LOSSES
from train.objectives import Eagle1Distillation, Eagle3TrainingTimeTest, MedusaDistillation
from train.peagle_objective import PEagleParallelDrafting
from train.setup_base import (
    BLOCK_DRAFTS_ONLY,
    Prepared,
    TrainContext,
    TrainingSetup,
    draft_vocab,
    held_out_selection,
    hold_out,
    logits_bytes,
    mask_token,
    nothing_after,
    offline_features,
    on_policy,
)
from train.sharded_target import whole_embeddings

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
    with whole_embeddings(ctx.target):
        heads = MedusaHeads.from_target(cfg.drafter, ctx.target)
    return Prepared(heads, objective, dataset, state={"holdout": holdout})


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
        pad_token_id=padding_id(ctx.tokenizer),
        batch_size=trainer.batch_size,
        max_seq_len=trainer.max_seq_len,
    )
    return {"medusa": calibration}


def _activations_medusa(cfg, *, tokens, hidden, layer, vocab, act_bytes, target_bytes) -> tuple[float, float]:
    d = cfg.drafter
    return 0.0, d.num_heads * (2 * d.num_layers * tokens * hidden * act_bytes + logits_bytes(tokens, vocab))


MEDUSA = TrainingSetup(
    _prepare_medusa,
    _finish_medusa,
    lambda cfg, target, config: MedusaHeads.from_target(cfg.drafter, target),
    _activations_medusa,
    losses=KD_LOSSES,
    off_policy_only="its heads read only the target's hidden states, never their own drafts",
)


# --- EAGLE-3 ----------------------------------------------------------------------------------


def _prepare_eagle3(ctx: TrainContext) -> Prepared:
    cfg = ctx.cfg
    vocab, report = draft_vocab(ctx)
    with whole_embeddings(ctx.target):
        drafter = Eagle3Drafter.from_target(cfg.drafter, ctx.target, vocab)
    store = offline_features(ctx, drafter.arch.layer_ids)
    objective = Eagle3TrainingTimeTest(
        ctx.target,
        drafter.arch.layer_ids,
        vocab.draft_to_target,
        steps=cfg.drafter.ttt_steps,
        decay=cfg.drafter.step_decay,
        store=store,
        loss=cfg.trainer.loss,
        on_policy=on_policy(ctx),
    )
    dataset, select = held_out_selection(ctx, objective)
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
        2 * layer + logits_bytes(tokens, min(d.draft_vocab_size, vocab))
    )  # attention reads 2H


EAGLE3 = TrainingSetup(
    _prepare_eagle3,
    _finish_eagle3,
    _meta_eagle3,
    _activations_eagle3,
    unroll=lambda d: d.ttt_steps,
    feature_ids=lambda d, config: eagle3_layer_ids(d, config.num_hidden_layers),
    losses=("fkl", "al"),  # fkl: soft cross-entropy against the target (KL up to its entropy)
    off_policy_only=None,
)


# --- P-EAGLE ----------------------------------------------------------------------------------


def _prepare_peagle(ctx: TrainContext) -> Prepared:
    d = ctx.cfg.drafter
    vocab, report = draft_vocab(ctx)
    token = mask_token(ctx, "mask_token_id")
    with whole_embeddings(ctx.target):
        drafter = PEagleDrafter.from_target(d, ctx.target, vocab, token)
    store = offline_features(ctx, drafter.arch.layer_ids)

    def objective(seed=None):
        return PEagleParallelDrafting(
            ctx.target,
            drafter.arch.layer_ids,
            vocab.draft_to_target,
            max_draft_tokens=d.max_draft_tokens,
            anchors_per_sequence=d.anchors_per_sequence,
            decay=d.position_decay,
            store=store,
            seed=seed,
        )

    dataset, select = held_out_selection(ctx, objective(seed=0))  # held-out scores on fixed anchors
    return Prepared(drafter, objective(), dataset, select=select, state={"draft_vocab": report, "mask_token_id": token})


def _finish_peagle(drafter: PEagleDrafter, prepared: Prepared, ctx: TrainContext) -> dict:
    return _finish_eagle3(drafter, prepared, ctx) | {"mask_token_id": prepared.state["mask_token_id"]}


def _meta_peagle(cfg, target, config) -> torch.nn.Module:
    vocab, _ = build_draft_vocab(torch.zeros(config.vocab_size, device="cpu"), cfg.drafter.draft_vocab_size)
    return PEagleDrafter.from_target(cfg.drafter, target, vocab, mask_token_id=0)  # the id changes no shape


def _peagle_entries(cfg) -> float:
    """Drafter entries per real token in training: every real entry plus K−1 masks per anchor."""
    d = cfg.drafter
    return 1 + d.anchors_per_sequence * (d.max_draft_tokens - 1) / cfg.trainer.max_seq_len


def _activations_peagle(cfg, *, tokens, hidden, layer, vocab, act_bytes, target_bytes) -> tuple[float, float]:
    d, grown = cfg.drafter, _peagle_entries(cfg)
    target = tokens * 3 * hidden * target_bytes  # the three captured layers
    entries = tokens * grown
    scores = (tokens / cfg.trainer.max_seq_len) * (cfg.trainer.max_seq_len * grown) ** 2 * 4  # one (N × N) mask/score
    return target, grown * 2 * layer + logits_bytes(entries, min(d.draft_vocab_size, vocab)) + scores


PEAGLE = TrainingSetup(
    _prepare_peagle,
    _finish_peagle,
    _meta_peagle,
    _activations_peagle,
    unroll=lambda d: 2,  # one forward, real entries plus masks (≈ 2× at anchors·(K−1) ≈ max_seq_len)
    feature_ids=lambda d, config: eagle3_layer_ids(d, config.num_hidden_layers),
    off_policy_only=BLOCK_DRAFTS_ONLY,
)


# --- EAGLE-1 ----------------------------------------------------------------------------------


def _prepare_eagle1(ctx: TrainContext) -> Prepared:
    d = ctx.cfg.drafter
    store = offline_features(ctx, [])  # only the lm_head inputs
    objective = Eagle1Distillation(
        ctx.target, len(ctx.tokenizer), noise=d.feature_noise, cls_weight=d.cls_weight, store=store
    )
    with whole_embeddings(ctx.target):
        drafter = Eagle1Drafter.from_target(d, ctx.target)
    return Prepared(drafter, objective, ctx.dataset)


def _activations_eagle1(cfg, *, tokens, hidden, layer, vocab, act_bytes, target_bytes) -> tuple[float, float]:
    return 0.0, 2 * layer + logits_bytes(tokens, vocab)


EAGLE1 = TrainingSetup(
    _prepare_eagle1,
    nothing_after,
    lambda cfg, target, config: Eagle1Drafter.from_target(cfg.drafter, target),
    _activations_eagle1,
    feature_ids=lambda d, config: [],
    # fkl: its fixed objective, feature regression plus soft cross-entropy
    off_policy_only="on-policy training is implemented for EAGLE-3, not for EAGLE-1's feature regression",
)


# --- DFlash -----------------------------------------------------------------------------------


def _prepare_dflash(ctx: TrainContext) -> Prepared:
    trainer, d = ctx.cfg.trainer, ctx.cfg.drafter
    token = mask_token(ctx, "mask_token_id")
    with whole_embeddings(ctx.target):
        drafter = DFlashDrafter.from_target(d, ctx.target, token)
    objective = DFlashDenoising(
        ctx.target,
        drafter.arch.layer_ids,
        block_size=d.block_size,
        mask_token_id=token,
        anchors_per_sequence=d.anchors_per_sequence,
        loss=trainer.loss,
        vocab_size=len(ctx.tokenizer),
        decay=d.loss_decay,
        jsd_beta=trainer.jsd_beta,
        temperature=trainer.kd_temperature,
    )
    return Prepared(drafter, objective, ctx.dataset, state={"mask_token_id": token})


def _finish_dflash(drafter: DFlashDrafter, prepared: Prepared, ctx: TrainContext) -> dict:
    return {"mask_token_id": prepared.state["mask_token_id"], "layer_ids": list(drafter.arch.layer_ids)}


def _meta_dflash(cfg, target, config) -> torch.nn.Module:
    mask = cfg.drafter.mask_token_id if cfg.drafter.mask_token_id is not None else 0  # any id: same shapes
    return DFlashDrafter.from_target(cfg.drafter, target, mask)


def _activations_dflash(cfg, *, tokens, hidden, layer, vocab, act_bytes, target_bytes) -> tuple[float, float]:
    d, seq = cfg.drafter, cfg.trainer.max_seq_len
    layers = len(d.layer_ids) if d.layer_ids is not None else 3
    sequences = tokens / seq
    queries = sequences * min(d.anchors_per_sequence, seq) * d.block_size  # block tokens of the micro-batch
    keys = seq + min(d.anchors_per_sequence, seq) * d.block_size  # context + blocks each query may see
    scores = queries * keys * (hidden // 128 or 1) * act_bytes  # attention weights per layer (heads ≈ H / 128)
    context = tokens * hidden * act_bytes * (2 + 2 * d.num_hidden_layers)  # fc, hidden_norm, K/V per layer
    blocks = d.num_hidden_layers * (layer * queries / tokens + scores)
    return tokens * layers * hidden * target_bytes, context + blocks + logits_bytes(queries, vocab)


DFLASH = TrainingSetup(
    _prepare_dflash,
    _finish_dflash,
    _meta_dflash,
    _activations_dflash,
    losses=KD_LOSSES,
    off_policy_only=BLOCK_DRAFTS_ONLY,
)
