"""PARD: a draft LM trained to draft K tokens in one forward, from K − 1 mask tokens appended
after random anchors (An et al., ICLR 2026)."""

from __future__ import annotations

from typing import Optional

import torch

from heads.pard import PardDrafter
from train.losses import KD_LOSSES, kd_loss
from train.setups.base import (
    BLOCK_DRAFTS_ONLY,
    Prepared,
    TrainContext,
    TrainingSetup,
    logits_bytes,
    mask_token,
    sample_anchors,
)
from train.setups.draft_lm import meta_draft_lm


def anchor_positions(counts: torch.Tensor, num_anchors: int, generator=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Random anchors per row: positions t whose next token t+1 counts (is assistant-written).

    Args:
        counts: (B, T) bool, token t counts in the loss.
    Returns:
        anchors (B, A) positions and (B, A) bool: real anchor (a row with fewer candidates pads with
        invalid ones).
    """
    candidate = torch.zeros_like(counts)
    candidate[:, :-1] = counts[:, 1:]  # anchor t predicts t+1 at its own slot
    return sample_anchors(candidate, num_anchors, generator)


def masked_block_inputs(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    anchors: torch.Tensor,
    anchor_valid: torch.Tensor,
    num_masks: int,
    mask_token: int,
):
    """The real tokens plus K − 1 masks per anchor, with positions and the attention pattern.

    Args:
        input_ids, attention_mask: (B, T) right-padded sequences.
        anchors, anchor_valid: (B, A) from anchor_positions.
        num_masks: K − 1.
    Returns:
        ids (B, L), positions (B, L), see (B, L, L) bool (query sees key), with L = T + A·(K − 1);
        mask slot (a, i) sits at column T + a·(K − 1) + (i − 1) and position anchors[a] + i.
    """
    B, T = input_ids.shape
    A, M, device = anchors.shape[1], num_masks, input_ids.device
    real = attention_mask.bool()
    i = torch.arange(1, M + 1, device=device)
    mask_pos = (anchors[:, :, None] + i).reshape(B, A * M)  # (B, A·M)
    ids = torch.cat([input_ids, torch.full((B, A * M), mask_token, dtype=input_ids.dtype, device=device)], 1)
    positions = torch.cat([torch.arange(T, device=device).expand(B, T), mask_pos], 1)
    causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    real_sees_real = causal[None] & real[:, None, :]  # (B, T, T)
    slot_anchor = anchors.repeat_interleave(M, 1)  # (B, A·M) the anchor of each mask slot
    mask_sees_real = (torch.arange(T, device=device)[None, None, :] <= slot_anchor[:, :, None]) & real[:, None, :]
    block = torch.arange(A * M, device=device) // M
    same_anchor = block[:, None] == block[None, :]
    earlier = torch.ones(A * M, A * M, dtype=torch.bool, device=device).tril()
    mask_sees_mask = (same_anchor & earlier)[None] & anchor_valid.repeat_interleave(M, 1)[:, None, :]
    eye = torch.eye(A * M, dtype=torch.bool, device=device)[None]  # an invalid slot still sees itself: no empty row
    see = torch.cat(
        [
            torch.cat([real_sees_real, torch.zeros(B, T, A * M, dtype=torch.bool, device=device)], 2),
            torch.cat([mask_sees_real, mask_sees_mask | eye], 2),
        ],
        1,
    )
    return ids, positions, see


class PardDistillation:
    """Next-token KD on the real tokens plus KD of every mask slot towards the target's distribution
    for the token it drafts (teacher logits at anchor + i predict token anchor + i + 1).

    At serving time the drafter sees [accepted tokens …, bonus x_t, MASK × (K − 1)] under causal
    attention at true positions, and the logits at x_t and at mask i give tokens t+1 and t+i+1. Training
    reproduces exactly that: each sequence keeps its real tokens (plain next-token distillation) and gets,
    for a random subset of anchor positions t, K − 1 appended mask tokens at positions t+1 … t+K−1 that
    see the real tokens up to t and the earlier masks of their own anchor only. All anchors of a batch
    run in ONE forward of the draft LM under a 4D attention mask.

    A position counts when its label token is assistant-written; the loss is the mean over real
    positions plus `mask_loss_weight` × the mean over mask slots. Logged: the real positions' top-1
    agreement, per mask slot i its top-1 agreement (`mask{i}_top1`), and `sim_tau` = 1 + Σ_k Π_{j≤k}
    acc_j over slot accuracies (acc_1 = the real positions'), a cheap stand-in for decoding.
    """

    def __init__(
        self,
        target: torch.nn.Module,
        loss: str,
        vocab_size: int,
        *,
        pard_token: int,
        max_draft_tokens: int,
        anchors_per_sequence: int,
        mask_loss_weight: float = 1.0,
        jsd_beta: float = 0.5,
        kd_temperature: float = 1.0,
    ):
        self.target, self.loss, self.vocab_size = target, loss, vocab_size
        self.pard_token, self.num_masks, self.num_anchors = pard_token, max_draft_tokens - 1, anchors_per_sequence
        self.mask_loss_weight, self.jsd_beta, self.kd_temperature = mask_loss_weight, jsd_beta, kd_temperature
        self.progress_keys = ["loss", "top1_agreement", "sim_tau"]

    def __call__(self, model, batch):
        input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
        B, T = input_ids.shape
        counts = (batch["loss_mask"] * attention_mask).bool()  # (B, T) token t counts
        anchors, anchor_valid = anchor_positions(counts, self.num_anchors)
        ids, positions, see = masked_block_inputs(
            input_ids, attention_mask, anchors, anchor_valid, self.num_masks, self.pard_token
        )
        dtype = next(model.parameters()).dtype
        bias = torch.zeros(see.shape, dtype=dtype, device=see.device).masked_fill(~see, torch.finfo(dtype).min)
        student = model(input_ids=ids, attention_mask=bias[:, None], position_ids=positions).logits  # (B, L, V)
        student = student[..., : self.vocab_size]
        teacher = None  # ce: the samples' own tokens are the labels (greedy answers: the target's argmax), no forward
        if self.loss != "ce":
            with torch.no_grad():
                teacher = self.target(input_ids=input_ids, attention_mask=attention_mask).logits[..., : self.vocab_size]
        t = self.kd_temperature
        # Real tokens: position s predicts s+1.
        real = counts[:, 1:]  # (B, T−1)
        real_loss = self._kd(student[:, : T - 1][real], _at(teacher, real, T - 1), input_ids[:, 1:][real], t)
        # Mask slot (a, i): position anchor+i predicts token anchor+i+1, the teacher's logits at anchor+i.
        M = self.num_masks
        slot_pos = positions[:, T:]  # (B, A·M)
        label_pos = slot_pos + 1
        in_range = label_pos < T
        label_pos = label_pos.clamp(max=T - 1)
        slot_counts = in_range & anchor_valid.repeat_interleave(M, 1) & counts.gather(1, label_pos)
        labels = input_ids.gather(1, label_pos)
        slot_teacher = None
        if teacher is not None:
            slot_teacher = teacher.gather(1, slot_pos.clamp(max=T - 1)[..., None].expand(-1, -1, teacher.shape[-1]))
        mask_loss = self._kd(student[:, T:][slot_counts], _at(slot_teacher, slot_counts), labels[slot_counts], t)
        loss = real_loss + self.mask_loss_weight * mask_loss
        with torch.no_grad():
            metrics = {"loss": loss.detach(), "real_loss": real_loss.detach(), "mask_loss": mask_loss.detach()}
            # the teacher's choice, or under ce the label (the target's own greedy token)
            chosen = input_ids[:, 1:] if teacher is None else teacher[:, :-1].argmax(-1)
            agree = student[:, : T - 1].argmax(-1) == chosen  # (B, T−1)
            acc = [agree[real].float().mean() if real.any() else agree.new_zeros((), dtype=torch.float)]
            slot_agree = student[:, T:].argmax(-1) == (labels if slot_teacher is None else slot_teacher.argmax(-1))
            slot_index = torch.arange(slot_pos.shape[1], device=ids.device) % M
            for i in range(M):
                m = slot_counts & (slot_index == i)
                acc.append(slot_agree[m].float().mean() if m.any() else slot_agree.new_zeros((), dtype=torch.float))
                metrics[f"mask{i + 1}_top1"] = acc[-1]
            metrics["top1_agreement"] = acc[0]
            metrics["sim_tau"] = 1 + torch.stack(acc).cumprod(0).sum()
            metrics["positions"] = real.sum()
        return loss, metrics

    def _kd(self, student, teacher, labels, t):
        """Mean KD loss over N positions; 0 (still in the graph) when there are none."""
        per_token = kd_loss(self.loss, student / t, None if teacher is None else teacher / t, labels, self.jsd_beta)
        return per_token.sum() / max(per_token.numel(), 1)


def _at(teacher: Optional[torch.Tensor], where: torch.Tensor, length: Optional[int] = None) -> Optional[torch.Tensor]:
    """The teacher's logits (cut to `length` positions) where `where` holds; None without a teacher (ce)."""
    return None if teacher is None else teacher[:, :length][where]


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
        pard_token=token,
        max_draft_tokens=d.max_draft_tokens,
        anchors_per_sequence=d.anchors_per_sequence,
        mask_loss_weight=d.mask_loss_weight,
        jsd_beta=trainer.jsd_beta,
        kd_temperature=trainer.kd_temperature,
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


SETUP = TrainingSetup(
    prepare=_prepare_pard,
    meta_drafter=meta_draft_lm,
    activations=_activations_pard,
    finish=_finish_pard,
    losses=KD_LOSSES,
    off_policy_only=BLOCK_DRAFTS_ONLY,
)
