"""P-EAGLE's objective: EAGLE-3's first step plus parallel mask slots, one drafter forward per batch.

One frozen target forward (or the offline feature store) gives the fused features and logits.
The drafter then runs once over [every real entry ; K−1 mask entries after each of A random
anchors per sequence] (heads.peagle.parallel_attention_mask):
- real entry t (feature h_t, token x_{t+1}, position t) predicts x_{t+2}: draft position 0, the
  bonus slot, exactly EAGLE-3's step 0;
- mask i of anchor t (fc(mask_hidden), the mask id, position t+i) sees real entries ≤ t and
  masks 1…i of its anchor, and predicts x_{t+i+2}: draft position i.
Each position's target is the target's distribution for its token (logits one position earlier)
restricted to the draft vocabulary; loss_k is the soft cross-entropy over the positions whose
token is assistant-written, the total Σ_k decay^k · loss_k.
"""

from __future__ import annotations

import torch

from train.anchors import sample_anchors
from train.objectives import Eagle3TrainingTimeTest


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
        decay: float = 0.8,
        store=None,
        seed: int | None = None,
    ):
        """seed: fixes the anchors per call (held-out scoring compares checkpoints on the same ones)."""
        super().__init__(target, layer_ids, draft_ids, steps=1, decay=decay, store=store)
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
            total = total + self.decay**j * loss_j
            with torch.no_grad():
                hit = (draft_ids[q.argmax(-1)] == tj).float()
                acc = hit.mean() if hit.numel() else hit.new_zeros(())
                chain = chain * acc
                sim_tau = sim_tau + chain
                metrics[f"pos{j}_loss"], metrics[f"pos{j}_acc"] = loss_j.detach(), acc
        metrics["loss"], metrics["sim_tau"], metrics["positions"] = total.detach(), sim_tau, m0.sum()
        return total, metrics
