"""Training setups of the drafters that are causal LMs themselves: the draft LM, PARD and layer skipping.

Each row (`DRAFT_LM`, `PARD`, `LAYER_SKIP`) is listed in the table in train/setups.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from distill.target import eos_token_ids, padding_id
from heads.draft_lm import DraftLM
from heads.layer_skip import LayerSkipDrafter, decoder_layers, skipped_config
from heads.pard import PardDrafter
from train.data import collate
from train.layer_skip_search import search_skip_layers
from train.losses import KD_LOSSES, LOSSES
from train.objectives import DraftLMDistillation
from train.pard_objective import PardDistillation
from train.setup_base import (
    BLOCK_DRAFTS_ONLY,
    Prepared,
    TrainContext,
    TrainingSetup,
    hold_out,
    logits_bytes,
    mask_token,
    nothing_after,
    on_policy,
)

# --- draft LM ---------------------------------------------------------------------------------


def draft_lm_objective(ctx: TrainContext) -> DraftLMDistillation:
    trainer = ctx.cfg.trainer
    return DraftLMDistillation(
        ctx.target,
        trainer.loss,
        len(ctx.tokenizer),
        jsd_beta=trainer.jsd_beta,
        temperature=trainer.kd_temperature,
        gamma=trainer.acceptance_gamma,
        on_policy=on_policy(ctx),
        pad_token_id=padding_id(ctx.tokenizer),
        eos_ids=frozenset(eos_token_ids(ctx.target, ctx.tokenizer)),
    )


def _prepare_draft_lm(ctx: TrainContext) -> Prepared:
    cfg = ctx.cfg
    drafter = DraftLM.from_config(cfg.drafter, ctx.target.config, ctx.tokenizer, cfg.target.trust_remote_code)
    return Prepared(drafter, draft_lm_objective(ctx), ctx.dataset)


def _meta_draft_lm(cfg, target, config) -> torch.nn.Module:
    if cfg.drafter.init:  # a pretrained draft LM: plan from its config.json likewise
        from transformers import AutoModelForCausalLM

        from distill.target import target_config

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
    return 0.0, cfg.drafter.num_hidden_layers * layer + logits_bytes(tokens, vocab)


DRAFT_LM = TrainingSetup(
    _prepare_draft_lm,
    nothing_after,
    _meta_draft_lm,
    _activations_draft_lm,
    losses=LOSSES,
    off_policy_only=None,
    on_policy_rollouts=("chains", "answers"),
)


# --- PARD -----------------------------------------------------------------------------------


def _prepare_pard(ctx: TrainContext) -> Prepared:
    cfg, trainer, d = ctx.cfg, ctx.cfg.trainer, ctx.cfg.drafter
    token = mask_token(ctx, "pard_token", ctx.target.config.vocab_size)
    drafter = PardDrafter.from_config(
        d, ctx.target.config, ctx.tokenizer, cfg.target.trust_remote_code, pard_token=token
    )
    objective = PardDistillation(
        ctx.target,
        trainer.loss,
        len(ctx.tokenizer),
        mask_token=token,
        max_draft_tokens=d.max_draft_tokens,
        anchors_per_sequence=d.anchors_per_sequence,
        mask_weight=d.mask_loss_weight,
        jsd_beta=trainer.jsd_beta,
        temperature=trainer.kd_temperature,
    )
    return Prepared(drafter, objective, ctx.dataset, state={"pard_token": token})


def _finish_pard(drafter, prepared: Prepared, ctx: TrainContext) -> dict:
    return {"pard_token": prepared.state["pard_token"]}


def _activations_pard(cfg, *, tokens, hidden, layer, vocab, act_bytes, target_bytes) -> tuple[float, float]:
    d = cfg.drafter
    grown = 1 + d.anchors_per_sequence * (d.max_draft_tokens - 1) / cfg.trainer.max_seq_len  # masks lengthen rows
    # the (L × L) attention bias the masked blocks need, per sequence of the micro-batch
    bias = (tokens / cfg.trainer.max_seq_len) * (cfg.trainer.max_seq_len * grown) ** 2 * act_bytes
    return 0.0, grown * (d.num_hidden_layers * layer + logits_bytes(tokens, vocab)) + bias


PARD = TrainingSetup(
    _prepare_pard, _finish_pard, _meta_draft_lm, _activations_pard, losses=KD_LOSSES, off_policy_only=BLOCK_DRAFTS_ONLY
)


# --- layer skipping ---------------------------------------------------------------------------


def _prepare_layer_skip(ctx: TrainContext) -> Prepared:
    """Search (or take) the layers to skip; the copy of the kept layers is what the loop may fine-tune."""
    d, trainer = ctx.cfg.drafter, ctx.cfg.trainer
    train_part, held_out = hold_out(ctx.dataset, d.search_samples, trainer.batch_size, "drafter.search_samples")
    state = {}
    skip = d.skip_layers
    if skip is None:
        batches = [
            {
                k: v.to(ctx.device)
                for k, v in collate(
                    rows["input_ids"], rows["loss_mask"], trainer.max_seq_len, padding_id(ctx.tokenizer)
                ).items()
            }
            for rows in (held_out[i : i + trainer.batch_size] for i in range(0, len(held_out), trainer.batch_size))
        ]
        result = search_skip_layers(
            ctx.target, batches, num_speculative_tokens=d.num_speculative_tokens, max_evaluations=d.max_evaluations
        )
        skip, state["layer_skip_search"] = result.best.skipped_layers, result.summary()
        print(
            f"layer skip search: skip {skip} of {len(decoder_layers(ctx.target))} layers — agreement "
            f"{result.best.agreement:.3f}, cost ratio {result.best.cost_ratio:.2f}, predicted speed-up "
            f"{result.best.predicted_speedup:.2f}× at γ={d.num_speculative_tokens} ({result.evaluations} sets, "
            f"{result.seconds:.0f} s)"
        )
    drafter = LayerSkipDrafter.from_target(ctx.target, skip)
    drafter.freeze_shared()
    objective = draft_lm_objective(ctx)
    return Prepared(drafter, objective, train_part, state=state, steps=d.fine_tune_steps)


def _finish_layer_skip(drafter, prepared: Prepared, ctx: TrainContext) -> dict:
    return {"layer_skip_search": prepared.state.get("layer_skip_search"), "skipped_layers": drafter.skipped_layers}


def _planned_skip(cfg) -> list[int]:
    """The skip set the planner sizes: the configured one, else one layer (the largest drafter a search returns)."""
    return list(cfg.drafter.skip_layers) if cfg.drafter.skip_layers is not None else [0]


def _meta_layer_skip(cfg, target, config) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    skip = _planned_skip(cfg)
    model = AutoModelForCausalLM.from_config(skipped_config(config, skip))
    return LayerSkipDrafter(model, skip, config.num_hidden_layers)


def _activations_layer_skip(cfg, *, tokens, hidden, layer, vocab, act_bytes, target_bytes) -> tuple[float, float]:
    from distill.target import target_config

    if not cfg.drafter.fine_tune_steps:
        return 0.0, 0.0  # the search runs the target without gradients
    layers = target_config(cfg.target.name_or_path, cfg.target.trust_remote_code).num_hidden_layers
    return 0.0, (layers - len(_planned_skip(cfg))) * layer + logits_bytes(tokens, vocab)


LAYER_SKIP = TrainingSetup(
    _prepare_layer_skip,
    _finish_layer_skip,
    _meta_layer_skip,
    _activations_layer_skip,
    losses=LOSSES,
    off_policy_only="its kept layers are fine-tuned on the target's answers only",
    whole_target_only="the drafter is a copy of the target's kept layers",
)
