"""DSpark: DFlash's block backbone trained anchor-first with a Markov head and a confidence head, as
DeepSpec trains it (deepspec/modeling/dspark: anchors, block mask, teacher-forced Markov bias, loss)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from heads.dspark import DSparkArch, DSparkDrafter
from train.losses import KD_LOSSES, cross_entropy
from train.setups.base import BLOCK_DRAFTS_ONLY, Prepared, TrainContext, TrainingSetup, logits_bytes, mask_token
from train.setups.block import BlockDenoising, block_activations, block_finish, meta_block
from train.sharded_target import whole_embeddings


def acceptance(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """(N,) Σ_v min(q, p): the probability that speculative sampling accepts a draft drawn from q."""
    q, p = student_logits.float().softmax(-1), teacher_logits.float().softmax(-1)
    return torch.minimum(q, p).sum(-1)


class DSparkDenoising(BlockDenoising):
    """batch → (loss, metrics) for a DSpark drafter: DFlash's objective (train/setups/dflash.py) laid out
    anchor-first — block [x_t, MASK × (B − 1)] at t … t + B − 1, slot k trained towards the target's
    distribution for token x_{t+k+1} (its logits at t + k) — with the Markov head reading the true
    previous token x_{t+k} (teacher forcing). Per draft, with weight loss_decay^k:
      (1 − ce_weight) · `loss`(student, target) + ce_weight · CE(student, x_{t+k+1})
      + confidence_weight · BCE(confidence, Σ min(q, p)), the acceptance target detached.
    Logged beside DFlash's metrics: `conf_err`, the confidence head's mean absolute error.
    """

    anchor_first = DSparkArch.anchor_first  # every slot, the anchor's too, drafts the next position

    def __init__(self, target, layer_ids, *, settings, mask_token_id: int, loss: str, vocab_size: int, trainer):
        super().__init__(
            target,
            layer_ids,
            block_size=settings.block_size,
            mask_token_id=mask_token_id,
            anchors_per_sequence=settings.anchors_per_sequence,
            loss=loss,
            vocab_size=vocab_size,
            loss_decay=settings.loss_decay,
            jsd_beta=trainer.jsd_beta,
            kd_temperature=trainer.kd_temperature,
        )
        self.ce_weight, self.confidence_weight = settings.ce_weight, settings.confidence_weight
        self.progress_keys = ["loss", "sim_tau", "acc1", "conf_err"]

    def model_inputs(self, blocks, input_ids) -> tuple:
        return (input_ids.gather(1, blocks.positions.clamp(max=input_ids.shape[1] - 1)),)  # x at each slot

    def per_token(self, student, teacher, labels) -> torch.Tensor:
        kd = super().per_token(student, teacher, labels)
        known = labels < student.shape[-1]  # a token past the tokenizer's vocabulary (a padded row) has no class
        ce = cross_entropy(student, labels.clamp(max=student.shape[-1] - 1)) * known
        return (1 - self.ce_weight) * kd + self.ce_weight * ce

    def extra_terms(self, outputs, pick, student, teacher, weight):
        confidence = outputs[1]
        if confidence is None:
            return 0.0, {}
        accept = acceptance(student.detach(), teacher)
        estimate = pick(confidence)
        bce = F.binary_cross_entropy_with_logits(estimate, accept, reduction="none")
        return self.confidence_weight * (weight * bce).sum(), {
            "conf_err": (estimate.detach().sigmoid() - accept).abs().mean()
        }


def _prepare_dspark(ctx: TrainContext) -> Prepared:
    token = mask_token(ctx, "mask_token_id")
    with whole_embeddings(ctx.target):
        drafter = DSparkDrafter.from_target(ctx.cfg.drafter, ctx.target, token)
    objective = DSparkDenoising(
        ctx.target,
        drafter.arch.layer_ids,
        settings=ctx.cfg.drafter,
        mask_token_id=token,
        loss=ctx.cfg.trainer.loss,
        vocab_size=len(ctx.tokenizer),
        trainer=ctx.cfg.trainer,
    )
    return Prepared(drafter, objective, ctx.dataset, state={"mask_token_id": token})


def _activations_dspark(cfg, *, tokens, hidden, layer, vocab, act_bytes, target_bytes) -> tuple[float, float]:
    """DFlash's, plus the Markov bias: one more vocabulary-wide tensor per block query."""
    target, drafter = block_activations(
        cfg, tokens=tokens, hidden=hidden, layer=layer, vocab=vocab, act_bytes=act_bytes, target_bytes=target_bytes
    )
    d = cfg.drafter
    queries = tokens / cfg.trainer.max_seq_len * min(d.anchors_per_sequence, cfg.trainer.max_seq_len) * d.block_size
    return target, drafter + logits_bytes(queries, vocab)


SETUP = TrainingSetup(
    prepare=_prepare_dspark,
    meta_drafter=meta_block(DSparkDrafter),
    activations=_activations_dspark,
    finish=block_finish,
    losses=KD_LOSSES,
    off_policy_only=BLOCK_DRAFTS_ONLY,
)
