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
from heads.dflash import DFlashDrafter
from heads.draft_lm import DraftLM
from heads.eagle import Eagle3Drafter
from heads.eagle1 import Eagle1Drafter
from heads.layer_skip import LayerSkipDrafter, decoder_layers, skipped_config
from heads.medusa import MedusaHeads
from heads.pard import PardDrafter
from heads.peagle import PEagleDrafter
from heads.vocab import build_draft_vocab, pick_mask_token, token_counts
from train.calibration import calibrate_medusa
from train.data import collate
from train.dflash_objective import DFlashDenoising
from train.errors import PipelineError
from train.layer_skip_search import search_skip_layers
from train.loop import best_weights
from train.losses import KD_LOSSES, LOSSES
from train.objectives import DraftLMDistillation, Eagle1Distillation, Eagle3TrainingTimeTest, MedusaDistillation
from train.on_policy import OnPolicy
from train.pard_objective import PardDistillation
from train.peagle_objective import PEagleParallelDrafting


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


@dataclass
class Prepared:
    drafter: torch.nn.Module  # fresh, to be trained
    objective: Callable  # train.objectives.Objective
    dataset: Any  # what training iterates over (held-out rows removed)
    select: Optional[Callable] = None  # model → score; the best-scoring checkpoint is kept
    state: dict = field(default_factory=dict)  # handed to `finish` (held-out rows, reports)
    steps: Optional[int] = None  # optimizer steps the family sets (layer skipping's fine-tune); None = trainer's


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
    losses: tuple[str, ...] = ("fkl",)  # trainer.loss values the objective implements (others are refused)
    # why trainer.policy=on_policy is refused, or None where the objective trains on the drafter's own drafts
    off_policy_only: Optional[str] = "its drafts never feed back into its own inputs"
    on_policy_rollouts: tuple[str, ...] = ("chains",)  # trainer.on_policy_rollout values it implements


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


def on_policy(ctx: TrainContext) -> Optional[OnPolicy]:
    """The on-policy sampler trainer.policy asks for, or None (off-policy)."""
    trainer = ctx.cfg.trainer
    if trainer.policy != "on_policy":
        return None
    return OnPolicy(
        trainer.on_policy_fraction, trainer.on_policy_temperature, trainer.seed, ctx.rank, trainer.on_policy_rollout
    )


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
        pad_token_id=ctx.tokenizer.pad_token_id,
        eos_ids=frozenset(eos_token_ids(ctx.target, ctx.tokenizer)),
    )


def _prepare_draft_lm(ctx: TrainContext) -> Prepared:
    cfg = ctx.cfg
    drafter = DraftLM.from_config(cfg.drafter, ctx.target.config, ctx.tokenizer, cfg.target.trust_remote_code)
    return Prepared(drafter, draft_lm_objective(ctx), ctx.dataset)


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


# --- PARD -----------------------------------------------------------------------------------


def mask_token(ctx: TrainContext, key: str, vocab_rows: int) -> int:
    """drafter.<key>, or an id the distilled data never contains (heads.vocab.pick_mask_token)."""
    setting = getattr(ctx.cfg.drafter, key)
    if setting is not None:
        return setting
    keep = {ctx.tokenizer.pad_token_id, *eos_token_ids(ctx.target, ctx.tokenizer)}
    token = pick_mask_token(
        ctx.dataset["input_ids"], vocab_rows, ctx.tokenizer.all_special_ids, exclude=keep, setting=f"drafter.{key}"
    )
    print(f"mask token: id {token} ({ctx.tokenizer.convert_ids_to_tokens(token)!r}), never seen in the distilled data")
    return token


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
    return 0.0, grown * (d.num_hidden_layers * layer + _logits_bytes(tokens, vocab)) + bias


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


def draft_vocab(ctx: TrainContext):
    """EAGLE-3's reduced vocabulary (heads.vocab.DraftVocab) from the distilled answers, and its coverage report."""
    vocab_rows = ctx.target.get_output_embeddings().weight.shape[0]
    counts = token_counts(ctx.dataset["input_ids"], ctx.dataset["loss_mask"], vocab_rows)
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


def _prepare_eagle3(ctx: TrainContext) -> Prepared:
    cfg = ctx.cfg
    vocab, report = draft_vocab(ctx)
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
        2 * layer + _logits_bytes(tokens, min(d.draft_vocab_size, vocab))
    )  # attention reads 2H


# --- P-EAGLE ----------------------------------------------------------------------------------


def _prepare_peagle(ctx: TrainContext) -> Prepared:
    d = ctx.cfg.drafter
    vocab, report = draft_vocab(ctx)
    token = mask_token(ctx, "mask_token_id", ctx.target.get_input_embeddings().weight.shape[0])
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
    return target, grown * 2 * layer + _logits_bytes(entries, min(d.draft_vocab_size, vocab)) + scores


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


# --- DFlash -----------------------------------------------------------------------------------


def _prepare_dflash(ctx: TrainContext) -> Prepared:
    trainer, d = ctx.cfg.trainer, ctx.cfg.drafter
    token = mask_token(ctx, "mask_token_id", ctx.target.get_input_embeddings().weight.shape[0])
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
    return tokens * layers * hidden * target_bytes, context + blocks + _logits_bytes(queries, vocab)


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
                    rows["input_ids"], rows["loss_mask"], trainer.max_seq_len, ctx.tokenizer.pad_token_id
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
    from train.planner import target_config

    if not cfg.drafter.fine_tune_steps:
        return 0.0, 0.0  # the search runs the target without gradients
    layers = target_config(cfg.target.name_or_path, cfg.target.trust_remote_code).num_hidden_layers
    return 0.0, (layers - len(_planned_skip(cfg))) * layer + _logits_bytes(tokens, vocab)


_BLOCK = "it drafts a whole block in one forward, so its inputs never hold its own drafts"
SETUPS: dict[str, TrainingSetup] = {
    "draft_lm": TrainingSetup(
        _prepare_draft_lm,
        _nothing_after,
        _meta_draft_lm,
        _activations_draft_lm,
        losses=LOSSES,
        off_policy_only=None,
        on_policy_rollouts=("chains", "answers"),
    ),
    "pard": TrainingSetup(
        _prepare_pard, _finish_pard, _meta_draft_lm, _activations_pard, losses=KD_LOSSES, off_policy_only=_BLOCK
    ),
    "medusa": TrainingSetup(
        _prepare_medusa,
        _finish_medusa,
        lambda cfg, target, config: MedusaHeads.from_target(cfg.drafter, target),
        _activations_medusa,
        losses=KD_LOSSES,
        off_policy_only="its heads read only the target's hidden states, never their own drafts",
    ),
    "eagle3": TrainingSetup(
        _prepare_eagle3,
        _finish_eagle3,
        _meta_eagle3,
        _activations_eagle3,
        unroll=lambda d: d.ttt_steps,
        feature_layers=lambda d: 3,
        losses=("fkl", "al"),  # fkl: soft cross-entropy against the target (KL up to its entropy)
        off_policy_only=None,
    ),
    "peagle": TrainingSetup(
        _prepare_peagle,
        _finish_peagle,
        _meta_peagle,
        _activations_peagle,
        unroll=lambda d: 2,  # one forward, real entries plus masks (≈ 2× at anchors·(K−1) ≈ max_seq_len)
        feature_layers=lambda d: 3,
        off_policy_only=_BLOCK,
    ),
    "eagle1": TrainingSetup(
        _prepare_eagle1,
        _nothing_after,
        lambda cfg, target, config: Eagle1Drafter.from_target(cfg.drafter, target),
        _activations_eagle1,
        feature_layers=lambda d: 0,
        # fkl: its fixed objective, feature regression plus soft cross-entropy
        off_policy_only="on-policy training is implemented for EAGLE-3, not for EAGLE-1's feature regression",
    ),
    "dflash": TrainingSetup(
        _prepare_dflash, _finish_dflash, _meta_dflash, _activations_dflash, losses=KD_LOSSES, off_policy_only=_BLOCK
    ),
    "layer_skip": TrainingSetup(
        _prepare_layer_skip,
        _finish_layer_skip,
        _meta_layer_skip,
        _activations_layer_skip,
        losses=LOSSES,
        off_policy_only="its kept layers are fine-tuned on the target's answers only",
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
