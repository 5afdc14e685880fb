"""The block drafters' shared training (DFlash, DSpark, DFlash2): anchor blocks cut from the target's own samples,
the denoising objective every block family extends (each block's mask slots drafted in one forward, scored against
the target's distribution at the positions the family's layout drafts: `anchor_first`, heads/block.py), and the
setup parts their rows share (prepare, the meta drafter for plans, activations, finish)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from distill.features.capture import layer_features
from heads.dflash import DFlashArch
from train.losses import kd_loss
from train.setups.base import (
    Prepared,
    TrainContext,
    logits_bytes,
    mask_token,
    sample_anchors,
)
from train.sharded_target import whole_embeddings


@dataclass
class Blocks:
    """The anchor blocks of a batch; A anchors per row, B = block size, m = A·B block queries."""

    anchors: torch.Tensor  # (B_rows, A) anchor positions t, ascending per row
    anchor_valid: torch.Tensor  # (B_rows, A) False: the row had fewer candidates (the block is padding)
    tokens: torch.Tensor  # (B_rows, m) [x_t, MASK × (B − 1)] per anchor
    positions: torch.Tensor  # (B_rows, m) t … t + B − 1 per anchor
    mask: torch.Tensor  # (B_rows, m, T + m) bool: context entries then block entries each query sees
    label_positions: torch.Tensor  # (B_rows, A, D) the position of each drafting slot's label (may be ≥ T)
    label_valid: torch.Tensor  # (B_rows, A, D) the label exists and is assistant-written
    first_slot: int  # the block's first drafting slot: 1 (fill-in, D = B − 1) or 0 (anchor-first, D = B)


def anchor_blocks(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    loss_mask: torch.Tensor,
    block_size: int,
    num_anchors: int,
    mask_token_id: int,
    anchor_first: bool = False,
) -> Blocks:
    """Draw anchors (torch's RNG) and lay out their blocks, attention mask and labels.

    Fill-in (DFlash): mask slot i predicts the token at its own position t + i. Anchor-first (DSpark): every
    slot k, the anchor's included, predicts the next position t + k + 1."""
    rows, T = input_ids.shape
    device, width = input_ids.device, block_size
    counts = (loss_mask * attention_mask).bool()  # (B, T) assistant-written tokens
    candidates = torch.zeros_like(counts)
    candidates[:, :-1] = counts[:, :-1] & counts[:, 1:]  # x_t and x_{t+1} are the assistant's
    drawn, drawn_valid = sample_anchors(candidates, num_anchors)
    A = drawn.shape[1]
    anchors, order = drawn.sort(dim=1)  # (B, A) ascending
    anchor_valid = drawn_valid.gather(1, order)
    offsets = torch.arange(width, device=device)
    positions = anchors[..., None] + offsets  # (B, A, W)
    tokens = torch.full_like(positions, mask_token_id)
    tokens[..., 0] = input_ids.gather(1, anchors)
    m = A * width
    # Context: positions before the anchor that are real tokens; block: only the query's own block.
    context = (torch.arange(T, device=device) < anchors[..., None]) & attention_mask.bool()[:, None, :]  # (B, A, T)
    context = context[:, :, None, :].expand(rows, A, width, T).reshape(rows, m, T)
    block_of = torch.arange(m, device=device) // width
    own = (block_of[:, None] == block_of[None, :]).expand(rows, m, m)
    first_slot = 0 if anchor_first else 1
    label_positions = positions[..., first_slot:] + (1 if anchor_first else 0)  # (B, A, D)
    inside = label_positions < T
    label_valid = (
        anchor_valid[..., None]
        & inside
        & counts.gather(1, label_positions.clamp(max=T - 1).flatten(1)).view_as(label_positions)
    )
    return Blocks(
        anchors,
        anchor_valid,
        tokens.reshape(rows, m),
        positions.reshape(rows, m),
        torch.cat([context, own], dim=-1),
        label_positions,
        label_valid,
        first_slot,
    )


class BlockDenoising:
    """batch → (loss, metrics) for a DFlash drafter, target features and logits from one frozen forward.

    Per sequence, `anchors_per_sequence` random anchors t are drawn among the positions whose token
    x_t and next token x_{t+1} are assistant-written. Anchor t's block is [x_t, MASK × (B − 1)] at
    positions t … t + B − 1 (B = block_size), exactly what the drafter reads when serving after the
    target emitted x_t. Each block query sees the context features of positions < t (the verified
    tokens whose target features exist) and its whole own block (bidirectional), never another
    block; all anchors of a batch run in one forward with that block-diagonal + context mask.
    Mask slot i (position t + i) is trained towards the target's distribution for token x_{t+i}
    (its logits at t + i − 1) with `loss`, weighted by loss_decay^(i−1), counting only label
    tokens that are assistant-written.

    Logged: the weighted loss, per mask slot accuracy `acc{i}` (the drafter's argmax equals the
    target's argmax for token t+i), and `sim_tau` = 1 + Σ_i Π_{j≤i} acc_j, the accepted length a
    block would reach if slots erred independently.
    """

    def __init__(
        self,
        target: torch.nn.Module,
        layer_ids: list[int],
        *,
        block_size: int,
        mask_token_id: int,
        anchors_per_sequence: int,
        loss: str,
        vocab_size: int,
        loss_decay: float = 0.87,
        jsd_beta: float = 0.5,
        kd_temperature: float = 1.0,
    ):
        self.target, self.layer_ids, self.block_size = target, list(layer_ids), block_size
        self.mask_token_id, self.anchors_per_sequence = mask_token_id, anchors_per_sequence
        self.loss, self.vocab_size, self.loss_decay = loss, vocab_size, loss_decay
        self.jsd_beta, self.kd_temperature = jsd_beta, kd_temperature
        self.progress_keys = ["loss", "sim_tau", "acc1"]

    anchor_first = DFlashArch.anchor_first  # the family's block layout (heads/block.py); DSpark's is anchor-first

    def model_inputs(self, blocks: Blocks, input_ids: torch.Tensor) -> tuple:
        """Further drafter inputs after the block's (DSpark, DFlash2: the true tokens the heads condition on)."""
        return ()

    def per_token(self, student, teacher, labels) -> torch.Tensor:
        """(N,) the distillation loss of each drafting slot."""
        t = self.kd_temperature
        return kd_loss(self.loss, student / t, None if self.loss == "ce" else teacher / t, labels, self.jsd_beta)

    def extra_terms(self, outputs, pick, student, teacher, weight) -> tuple[Any, dict]:
        """A family's further loss terms: pick maps a (B, m, …) drafter output to the (N, …) drafting slots;
        weight (N,) the slots' normalised weights. → (loss term, metrics)."""
        return 0.0, {}

    def __call__(self, model, batch):
        input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
        rows, T = input_ids.shape
        device = input_ids.device
        with torch.no_grad():
            features, target_logits = layer_features(self.target, input_ids, attention_mask, self.layer_ids)
        blocks = anchor_blocks(
            input_ids,
            attention_mask,
            batch["loss_mask"],
            self.block_size,
            self.anchors_per_sequence,
            self.mask_token_id,
            anchor_first=self.anchor_first,
        )
        context_positions = torch.arange(T, device=device).expand(rows, T)
        outputs = model(
            features,
            context_positions,
            blocks.tokens,
            blocks.positions,
            blocks.mask,
            *self.model_inputs(blocks, input_ids),
        )
        logits = outputs[0] if isinstance(outputs, tuple) else outputs  # (B, m, V)
        A, W, V = blocks.anchors.shape[1], self.block_size, self.vocab_size
        valid = blocks.label_valid  # (B, A, D)
        D = valid.shape[-1]

        def pick(x: torch.Tensor) -> torch.Tensor:
            return x.view(rows, A, W, *x.shape[2:])[:, :, blocks.first_slot :][valid]

        student = pick(logits)[:, :V]  # (N, V) the drafting slots
        at = blocks.label_positions[valid]  # (N,) label positions
        row = torch.arange(rows, device=device)[:, None, None].expand_as(valid)[valid]
        teacher = target_logits[row, at - 1, :V]  # (N, V): the target's distribution for token x_at
        labels = input_ids[row, at]
        slot = torch.arange(D, device=device).expand_as(valid)[valid]  # (N,) drafting slot, 0-based
        weight = self.loss_decay ** slot.float()
        weight = weight / weight.sum().clamp(min=1e-9)  # an empty batch gives 0, not NaN
        loss = (weight * self.per_token(student, teacher, labels)).sum()
        extra, metrics = self.extra_terms(outputs, pick, student, teacher, weight)
        loss = loss + extra
        with torch.no_grad():
            hits = (student.argmax(-1) == teacher.argmax(-1)).float()
            seen = torch.bincount(slot, minlength=D).float()
            acc = torch.bincount(slot, weights=hits, minlength=D) / seen.clamp(min=1)  # (D,)
            metrics |= {"loss": loss.detach(), "sim_tau": 1 + acc.cumprod(0).sum(), "positions": valid.sum()}
            metrics |= {f"acc{i + 1}": acc[i] for i in range(D)}
        return loss, metrics


def prepare_block(drafter_class, objective_class, **settings):
    """The `prepare` of a fill-in block family (DFlash, DFlash2): its drafter on the target's shared embeddings and
    DFlash's objective class; settings: further objective arguments, each named by its drafter setting."""

    def prepare(ctx: TrainContext) -> Prepared:
        trainer, d = ctx.cfg.trainer, ctx.cfg.drafter
        token = mask_token(ctx, "mask_token_id")
        with whole_embeddings(ctx.target):
            drafter = drafter_class.from_target(d, ctx.target, token)
        objective = objective_class(
            ctx.target,
            drafter.arch.layer_ids,
            block_size=d.block_size,
            mask_token_id=token,
            anchors_per_sequence=d.anchors_per_sequence,
            loss=trainer.loss,
            vocab_size=len(ctx.tokenizer),
            loss_decay=d.loss_decay,
            jsd_beta=trainer.jsd_beta,
            kd_temperature=trainer.kd_temperature,
            **{name: getattr(d, name) for name in settings},
        )
        return Prepared(drafter, objective, ctx.dataset, state={"mask_token_id": token})

    return prepare


def block_finish(drafter, prepared: Prepared, ctx: TrainContext) -> dict:
    """The summary every block family reports: the mask id it picked and the layers it fuses."""
    return {"mask_token_id": prepared.state["mask_token_id"], "layer_ids": list(drafter.arch.layer_ids)}


def meta_block(drafter_class):
    """The planner's hook of a block family: its drafter for a (meta) target."""

    def meta(cfg, target, config) -> torch.nn.Module:
        mask = cfg.drafter.mask_token_id if cfg.drafter.mask_token_id is not None else 0  # any id: same shapes
        return drafter_class.from_target(cfg.drafter, target, mask)

    return meta


def block_activations(cfg, *, tokens, hidden, layer, vocab, act_bytes, target_bytes) -> tuple[float, float]:
    d, seq = cfg.drafter, cfg.trainer.max_seq_len
    layers = len(d.layer_ids) if d.layer_ids is not None else 3
    sequences = tokens / seq
    queries = sequences * min(d.anchors_per_sequence, seq) * d.block_size  # block tokens of the micro-batch
    keys = seq + min(d.anchors_per_sequence, seq) * d.block_size  # context + blocks each query may see
    scores = queries * keys * (hidden // 128 or 1) * act_bytes  # attention weights per layer (heads ≈ H / 128)
    context = tokens * hidden * act_bytes * (2 + 2 * d.num_hidden_layers)  # fc, hidden_norm, K/V per layer
    blocks = d.num_hidden_layers * (layer * queries / tokens + scores)
    return tokens * layers * hidden * target_bytes, context + blocks + logits_bytes(queries, vocab)
