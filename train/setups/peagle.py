"""P-EAGLE: EAGLE-3's drafter drafting K tokens in one forward, trained on EAGLE-3's first step plus
K − 1 mask slots after random anchors, all in one drafter forward per batch."""

from __future__ import annotations

import torch

from heads.eagle import eagle3_layer_ids
from heads.peagle import PEagleDrafter
from heads.vocab import build_draft_vocab
from train.setups.base import (
    BLOCK_DRAFTS_ONLY,
    Prepared,
    TrainContext,
    TrainingSetup,
    draft_vocab,
    held_out_selection,
    logits_bytes,
    mask_token,
    offline_features,
    sample_anchors,
)
from train.setups.eagle3 import Eagle3TrainingTimeTest, finish_eagle3
from train.sharded_target import whole_embeddings


def pick_anchors(counts: torch.Tensor, anchors: int, generator=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Random anchors t per row among those whose first label x_{t+2} counts, without replacement.

    Args:
        counts: (B, T) bool, token t is an assistant-written, attended label.
    Returns:
        anchors (B, A) positions, A = min(anchors, T−2), and (B, A) bool which of them are real
        (a row with fewer candidates pads with unusable ones).
    """
    return sample_anchors(counts[:, 2:], anchors, generator)  # (B, T−2): anchor t's first label is token t+2


class PEagleParallelDrafting(Eagle3TrainingTimeTest):
    """batch → (loss, metrics) for a heads.peagle.PEagleDrafter; target signals as EAGLE-3 gets them.

    One frozen target forward (or the offline feature store) gives the fused features and logits.
    The drafter then runs once over [every real entry ; K−1 mask entries after each of A random
    anchors per sequence] (heads.peagle.parallel_attention_mask):
    - real entry t (feature h_t, token x_{t+1}, position t) predicts x_{t+2}: draft position 0, the
      bonus slot, exactly EAGLE-3's step 0;
    - mask i of anchor t (fc(mask_hidden), the mask id, position t+i) sees real entries ≤ t and
      masks 1…i of its anchor, and predicts x_{t+i+2}: draft position i.
    Each position's target is the target's distribution for its token (logits one position earlier)
    restricted to the draft vocabulary; loss_k is the soft cross-entropy over the positions whose
    token is assistant-written, the total Σ_k position_decay^k · loss_k.

    Logged: per-position accuracy (the drafter's argmax, as a target id, equals the target's
    argmax), `sim_tau` = 1 + Σ_k Π_{i≤k} acc_i (the accepted length a chain of K drafts would reach
    if positions erred independently; picks the best checkpoint), `positions` (position 0's count).
    """

    def __init__(
        self,
        target: torch.nn.Module,
        layer_ids: list[int],
        draft_ids: torch.Tensor,
        max_draft_tokens: int = 8,
        anchors_per_sequence: int = 8,
        position_decay: float = 0.8,
        store=None,
        seed: int | None = None,
    ):
        """seed: fixes the anchors per call (held-out scoring compares checkpoints on the same ones)."""
        super().__init__(target, layer_ids, draft_ids, ttt_steps=1, step_decay=position_decay, store=store)
        self.position_decay = position_decay
        self.max_draft_tokens, self.anchors_per_sequence, self.seed = max_draft_tokens, anchors_per_sequence, seed
        self.progress_keys = ["loss", "sim_tau", "pos0_acc", f"pos{max_draft_tokens - 1}_acc"]

    def __call__(self, model, batch):
        input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
        features, target_logits = self._target_signals(batch)  # (B, T, F), (B, T, V)
        draft_ids = self.draft_ids.to(input_ids.device)
        target_p = target_logits[..., draft_ids].float().softmax(-1)  # (B, T, D) over the draft vocabulary
        target_top = target_logits.argmax(-1)  # (B, T)
        counts = (batch["loss_mask"] * attention_mask).bool()  # (B, T): token t is a counted label
        B, T = input_ids.shape
        M = self.max_draft_tokens - 1
        generator = None
        if self.seed is not None:
            generator = torch.Generator(device=input_ids.device).manual_seed(self.seed)
        anchors, anchor_ok = pick_anchors(counts, self.anchors_per_sequence, generator)  # (B, A)
        real, masks = model(features, input_ids, attention_mask, anchors, M)  # (B, T, D), (B, A, M, D)

        # Position 0: real entry t predicts token t+2 (the target's distribution at t+1).
        m0 = counts[:, 2:]  # (B, T−2)
        logits = [real[:, : T - 2][m0]]
        p, top = [target_p[:, 1 : T - 1][m0]], [target_top[:, 1 : T - 1][m0]]
        # Position i ≥ 1: mask i of anchor t predicts token t+i+2.
        label = anchors[:, :, None] + torch.arange(1, M + 1, device=anchors.device) + 2  # (B, A, M)
        inside = label < T
        idx = label.clamp(max=T - 1)
        rows = torch.arange(B, device=anchors.device)[:, None, None]
        keep = anchor_ok[:, :, None] & inside & counts[rows, idx]  # (B, A, M)
        for i in range(M):  # per draft position (K−1 small slices), not per anchor
            k = keep[:, :, i]
            logits.append(masks[:, :, i][k])
            p.append(target_p[rows[:, :, 0], idx[:, :, i] - 1][k])
            top.append(target_top[rows[:, :, 0], idx[:, :, i] - 1][k])

        total, metrics, chain = 0.0, {}, 1.0
        sim_tau = torch.ones((), device=input_ids.device)
        for j, (lj, pj, tj) in enumerate(zip(logits, p, top)):
            q = lj.float().log_softmax(-1)  # (N_j, D)
            loss_j = -(pj * q).sum(-1).sum() / max(q.shape[0], 1)  # 0, not NaN, when empty
            total = total + self.position_decay**j * loss_j
            with torch.no_grad():
                hit = (draft_ids[q.argmax(-1)] == tj).float()
                acc = hit.mean() if hit.numel() else hit.new_zeros(())
                chain = chain * acc
                sim_tau = sim_tau + chain
                metrics[f"pos{j}_loss"], metrics[f"pos{j}_acc"] = loss_j.detach(), acc
        metrics["loss"], metrics["sim_tau"], metrics["positions"] = total.detach(), sim_tau, m0.sum()
        return total, metrics


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
            position_decay=d.position_decay,
            store=store,
            seed=seed,
        )

    dataset, select = held_out_selection(ctx, objective(seed=0))  # held-out scores on fixed anchors
    return Prepared(drafter, objective(), dataset, select=select, state={"draft_vocab": report, "mask_token_id": token})


def _finish_peagle(drafter: PEagleDrafter, prepared: Prepared, ctx: TrainContext) -> dict:
    return finish_eagle3(drafter, prepared, ctx) | {"mask_token_id": prepared.state["mask_token_id"]}


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


SETUP = TrainingSetup(
    prepare=_prepare_peagle,
    held_out=lambda d: {"drafter.select_samples": d.select_samples},
    meta_drafter=_meta_peagle,
    activations=_activations_peagle,
    finish=_finish_peagle,
    unroll=lambda d: 2,  # one forward, real entries plus masks (≈ 2× at anchors·(K−1) ≈ max_seq_len)
    feature_ids=lambda d, config: eagle3_layer_ids(d, config.num_hidden_layers),
    off_policy_only=BLOCK_DRAFTS_ONLY,
)
