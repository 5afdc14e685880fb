"""Per-drafter training objectives: batch → (loss, metrics). The loop is shared by all."""

from __future__ import annotations

from typing import Optional, Protocol

import torch
import torch.nn.functional as F

from distill.features import final_hidden_states, layer_features
from heads.medusa_tree import rank_accuracy
from train.losses import (
    acceptance_length_loss,
    acceptance_rate,
    chain_accepted_length,
    kd_loss,
    sequence_accepted_length,
)
from train.on_policy import (
    OnPolicy,
    branch_block,
    chain_starts,
    draft_lm_chains,
    draft_lm_rollout,
    score_branches,
    tree_logits,
)
from train.sharded_target import whole_embeddings


class Objective(Protocol):
    """batch → (loss, metrics). metrics["positions"] counts the positions the loss averages over
    (the first term's, for a sum of terms): the loop weights each process's loss by it, so N
    processes average over the global batch's positions as one process would."""

    def __call__(
        self, model: torch.nn.Module, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...


class DraftLMDistillation:
    """Distil the target into a draft LM on the target's own samples, teacher computed online.

    Position t's logits predict token t+1; a position counts when token t+1 is assistant-written.
    Logits are compared over the first `vocab_size` entries (the tokenizer's vocabulary), so a
    draft and a target with differently padded embedding tables still line up. With `on_policy`,
    a share of micro-batches trains on the γ-chains the drafter drafts from every counted position,
    or swaps the target's answers for the drafter's own (rollout `answers`; train/on_policy.py).
    Loss `al` maximises the expected accepted length of γ-chains starting at every counted position.
    """

    def __init__(
        self,
        target: torch.nn.Module,
        loss: str,
        vocab_size: int,
        jsd_beta: float = 0.5,
        temperature: float = 1.0,
        *,
        gamma: int = 4,
        on_policy: Optional[OnPolicy] = None,
        pad_token_id: int = 0,
        eos_ids: frozenset = frozenset(),
    ):
        self.target, self.loss, self.vocab_size = target, loss, vocab_size
        self.jsd_beta, self.temperature, self.gamma = jsd_beta, temperature, gamma
        self.on_policy, self.pad_token_id, self.eos_ids = on_policy, pad_token_id, set(eos_ids)

    def __call__(self, model, batch):
        drafted = self.on_policy is not None and self.on_policy.takes(batch)
        if drafted and self.on_policy.rollout == "chains":
            return self._on_chains(model, batch)
        if drafted:
            batch = draft_lm_rollout(model, batch, self.on_policy, self.vocab_size, self.pad_token_id, self.eos_ids)
        input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
        mask = (batch["loss_mask"][:, 1:] * attention_mask[:, 1:]).bool()  # (B, T-1)
        student = model(input_ids=input_ids, attention_mask=attention_mask).logits
        student = student[:, :-1, : self.vocab_size][mask]  # (N, V)
        teacher = None
        if self.loss != "ce":
            with torch.no_grad():
                teacher = self.target(input_ids=input_ids, attention_mask=attention_mask).logits
                teacher = teacher[:, :-1, : self.vocab_size][mask]
        labels = input_ids[:, 1:][mask]  # (N,)
        t = self.temperature
        if self.loss == "al":
            alpha = acceptance_rate((student / t).softmax(-1), (teacher / t).softmax(-1))  # (N,)
            grid = torch.zeros(mask.shape, dtype=alpha.dtype, device=alpha.device).masked_scatter(mask, alpha)
            per_token = acceptance_length_loss(sequence_accepted_length(grid, mask, self.gamma)[mask], self.gamma)
        else:
            per_token = kd_loss(self.loss, student / t, None if teacher is None else teacher / t, labels, self.jsd_beta)
        loss = per_token.sum() / max(per_token.numel(), 1)  # a batch cut before any answer token gives 0, not NaN
        with torch.no_grad():
            reference = labels if teacher is None else teacher.argmax(-1)
            agree = (student.argmax(-1) == reference).float()
            metrics = {
                "loss": loss.detach(),
                "top1_agreement": agree.sum() / max(agree.numel(), 1),
                "positions": mask.sum(),
                "on_policy": torch.tensor(float(drafted)),
            }
        return loss, metrics

    def _on_chains(self, model, batch):
        """The loss over the γ-chains the drafter drafts after every counted position, scored by the target.

        Step 1 of a chain reads the target's sequence (the off-policy position); steps 2…γ read the
        drafter's own earlier drafts, as in the speculative loop. KD losses sum the steps' means;
        `al` maximises each drafted chain's expected accepted length."""
        ids, attention = batch["input_ids"], batch["attention_mask"]
        anchors = chain_starts((batch["loss_mask"][:, 1:] * attention[:, 1:]).bool())
        drafts = draft_lm_chains(model, batch, anchors, self.gamma - 1, self.on_policy, self.vocab_size)
        tokens, parents, valid, node_of = branch_block(ids, attention, anchors, drafts)
        student = tree_logits(model, tokens, parents, valid)
        teacher = score_branches(self.target, tokens, parents, valid)
        rows, where = anchors.nonzero(as_tuple=True)
        nodes = [where + 1] + [n[rows, where] for n in node_of]  # per step: the node whose logits predict it
        q = torch.stack([student[rows, n, : self.vocab_size] for n in nodes]) / self.temperature  # (γ, N, V)
        p = torch.stack([teacher[rows, n, : self.vocab_size] for n in nodes]) / self.temperature
        count = max(len(rows), 1)  # a batch cut before any answer token gives 0, not NaN
        if self.loss == "al":
            expected = chain_accepted_length(acceptance_rate(q.softmax(-1), p.softmax(-1)))  # (N,)
            loss = acceptance_length_loss(expected, self.gamma).sum() / count
        else:
            loss = kd_loss(self.loss, q, p, None, self.jsd_beta).sum() / count
        with torch.no_grad():
            agree = (q[0].argmax(-1) == p[0].argmax(-1)).float()
            metrics = {
                "loss": loss.detach(),
                "top1_agreement": agree.sum() / max(agree.numel(), 1),
                "positions": torch.tensor(len(rows), device=ids.device),
                "on_policy": torch.tensor(1.0),
            }
        return loss, metrics


class MedusaDistillation:
    """Train Medusa heads on a frozen target's own samples, hidden states computed online.

    Head k at position t reads the target's final hidden state h_t and predicts token t+k+2;
    a position counts when that token is assistant-written. loss_k is `loss` between head k
    and either the sampled token (`ce`) or the target's own distribution for that token, i.e.
    its logits at t+k+1 (`fkl` etc.: self-distillation). The total is Σ_k decay^k · loss_k.
    Each head sees only its valid positions, so no (K, B, T, V) tensor is materialised.
    """

    def __init__(
        self,
        target: torch.nn.Module,
        num_heads: int,
        loss: str,
        vocab_size: int,
        *,
        decay: float = 0.8,
        jsd_beta: float = 0.5,
        temperature: float = 1.0,
    ):
        self.target, self.num_heads, self.loss, self.vocab_size = target, num_heads, loss, vocab_size
        self.decay, self.jsd_beta, self.temperature = decay, jsd_beta, temperature
        self.progress_keys = ["loss", *(f"head{k}_top1" for k in range(num_heads))]  # the rest goes to the trackers

    def __call__(self, model, batch):
        # (B, T, H), (B, T, V)
        hidden, target_logits = final_hidden_states(self.target, batch["input_ids"], batch["attention_mask"])
        inputs, all_labels, masks = medusa_positions(hidden, batch, self.num_heads, with_masks=True)
        total, metrics, t = 0.0, {}, self.temperature
        for k, (logits, labels, m) in enumerate(zip(model(inputs), all_labels, masks)):
            logits = logits[:, : self.vocab_size]  # (N_k, V)
            # logits at t+k+1 predict t+k+2
            teacher = None if self.loss == "ce" else target_logits[:, k + 1 : -1][m][:, : self.vocab_size] / t
            per_token = kd_loss(self.loss, logits / t, teacher, labels, self.jsd_beta)
            loss_k = per_token.sum() / max(per_token.numel(), 1)  # an empty head still joins the graph
            total = total + self.decay**k * loss_k
            with torch.no_grad():
                hits = rank_accuracy(logits, labels, 5).cumsum(0)  # top-1 … top-5
                metrics[f"head{k}_loss"] = loss_k.detach()
                metrics[f"head{k}_top1"], metrics[f"head{k}_top5"] = hits[0], hits[4]
        metrics["loss"], metrics["positions"] = total.detach(), masks[0].sum()
        return total, metrics


def medusa_positions(hidden: torch.Tensor, batch: dict[str, torch.Tensor], num_heads: int, with_masks: bool = False):
    """Per head k: the hidden states h_t (N_k, H) whose label token t+k+2 is assistant-written, and those labels (N_k,).

    With with_masks, also the (B, T−k−2) position masks that selected them.
    """
    counts = (batch["loss_mask"] * batch["attention_mask"]).bool()  # (B, T): token t counts
    masks = [counts[:, k + 2 :] for k in range(num_heads)]
    inputs = [hidden[:, : -(k + 2)][m] for k, m in enumerate(masks)]
    labels = [batch["input_ids"][:, k + 2 :][m] for k, m in enumerate(masks)]
    return (inputs, labels, masks) if with_masks else (inputs, labels)


@torch.no_grad()
def stored_logits(target: torch.nn.Module, last_hidden: torch.Tensor) -> torch.Tensor:
    """The target's logits from stored lm_head inputs (offline features): only its lm_head runs, gathered
    first where the target is sharded."""
    lm_head = target.get_output_embeddings()
    with whole_embeddings(target):
        return lm_head(last_hidden.to(lm_head.weight.dtype))


class Eagle3TrainingTimeTest:
    """EAGLE-3's training-time test on a frozen target's own samples, features computed online.

    Step j (of `steps`) at position t predicts token t+j+2 after reading the drafter's own step
    j−1 output; its target is the target's distribution for that token (logits at t+j+1)
    restricted to the draft vocabulary and renormalised; loss_j is the soft cross-entropy, the
    total Σ_j decay^j · loss_j. A position counts when its token is assistant-written. Logged per
    step: accuracy (the drafter's argmax, mapped to a target id, equals the target's argmax) and
    `sim_tau` = 1 + Σ_j Π_{i≤j} acc_i, the accepted length a chain of `steps` would reach if
    steps erred independently — a cheap stand-in for decoding, used to pick the best checkpoint.

    loss `al` instead maximises each position's expected accepted length Σ_j Π_{i≤j} α_j, α_j the
    acceptance rate of step j (the target's full distribution against the drafter's). With
    `on_policy`, a share of micro-batches feeds each step the token the drafter itself drew at the
    step before (as the speculative loop does) instead of the target's token, and the target
    scores those chains online (train/on_policy.py).
    """

    def __init__(
        self,
        target: torch.nn.Module,
        layer_ids: list[int],
        draft_ids: torch.Tensor,
        steps: int = 7,
        decay: float = 0.8,
        store=None,
        *,
        loss: str = "fkl",
        on_policy: Optional[OnPolicy] = None,
    ):
        """store: a distill.feature_store.FeatureStore for offline features (then only the target's lm_head runs)."""
        self.target, self.layer_ids, self.steps, self.decay, self.store = target, list(layer_ids), steps, decay, store
        self.draft_ids = draft_ids  # (D,) target id of each draft id
        self.loss, self.on_policy = loss, on_policy
        self.progress_keys = ["loss", "sim_tau", "step0_acc"]

    def _target_signals(self, batch):
        """(B, T, F) features and (B, T, V) logits: from a target forward, or from disk + the lm_head."""
        input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
        if self.store is None:
            return layer_features(self.target, input_ids, attention_mask, self.layer_ids)
        # host sync: disk lookup by row
        features, last_hidden = self.store.batch(batch["rows"].tolist(), input_ids.shape[1])
        return features.to(input_ids.device), stored_logits(self.target, last_hidden.to(input_ids.device))

    def __call__(self, model, batch):
        input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
        features, target_logits = self._target_signals(batch)  # (B, T, F), (B, T, V)
        draft_ids = self.draft_ids.to(input_ids.device)
        counts = (batch["loss_mask"] * attention_mask).bool()
        T = input_ids.shape[1]
        drafted = self.on_policy is not None and self.on_policy.takes(batch)
        drafts: list[torch.Tensor] = []  # on-policy: the token each step j ≥ 1 read, drawn at step j − 1
        if drafted:
            generator = self.on_policy.generator(batch, input_ids.device)

            def feed(j, previous_logits):
                drafts.append(draft_ids[self.on_policy.draw(previous_logits.detach(), generator)])
                return drafts[-1]

            outputs = model(features, input_ids, attention_mask, self.steps, feed)
        else:
            outputs = model(features, input_ids, attention_mask, self.steps)
        branch_logits, node_of = None, []
        if drafted and len(outputs) > 1:
            anchors = F.pad(counts[:, 2:], (0, 2))  # (B, T): anchor t's first draft is token t+2
            tokens, parents, valid, node_of = branch_block(
                input_ids, attention_mask, anchors, drafts[: len(outputs) - 1]
            )
            branch_logits = score_branches(self.target, tokens, parents, valid)  # (B, T + M, V)
        total, metrics, chain = 0.0, {}, 1.0
        sim_tau = torch.ones((), device=input_ids.device)
        alphas = []  # loss al: per step, (B, T) acceptance rates at counted positions
        for j, logits in enumerate(outputs):
            span = T - j - 2  # positions t whose label t+j+2 exists
            if span <= 0:
                break
            m = counts[:, j + 2 :]  # (B, span)
            if j and branch_logits is not None:  # the target on the drafter's own chain
                nodes = node_of[j - 1][:, :span][m]
                rows = m.nonzero()[:, 0]
                p_logits = branch_logits[rows, nodes]  # (N, V)
            else:
                p_logits = target_logits[:, j + 1 : j + 1 + span][m]  # (N, V) the target's logits for token t+j+2
            q = logits[:, :span][m].float().log_softmax(-1)  # (N, D)
            if self.loss == "al":
                alpha = acceptance_rate(q.exp(), p_logits.float().softmax(-1)[:, draft_ids])
                alphas.append(torch.zeros(m.shape, device=alpha.device).masked_scatter(m, alpha))
                loss_j = q.new_zeros(())
            else:
                p = p_logits[:, draft_ids].float().softmax(-1)  # over the draft vocabulary
                loss_j = -(p * q).sum(-1).sum() / max(q.shape[0], 1)
            total = total + self.decay**j * loss_j
            with torch.no_grad():
                hit = (draft_ids[q.argmax(-1)] == p_logits.argmax(-1)).float()
                acc = hit.mean() if hit.numel() else hit.new_zeros(())
                chain = chain * acc
                sim_tau = sim_tau + chain
                metrics[f"step{j}_loss"], metrics[f"step{j}_acc"] = loss_j.detach(), acc
        if self.loss == "al":  # chains start at positions whose first draft counts
            span0 = alphas[0].shape[1]
            stacked = torch.stack([F.pad(a, (0, span0 - a.shape[1])) for a in alphas])  # (γ, B, span0)
            starts = counts[:, 2:]
            expected = chain_accepted_length(stacked)[starts]
            total = acceptance_length_loss(expected, len(alphas)).sum() / max(expected.numel(), 1)
            metrics["expected_accepted"] = expected.detach().mean() if expected.numel() else total.detach()
        metrics["loss"], metrics["sim_tau"], metrics["positions"] = total.detach(), sim_tau, counts[:, 2:].sum()
        metrics["on_policy"] = torch.tensor(float(drafted))
        return total, metrics


class Eagle1Distillation:
    """EAGLE-1: regress the target's next final feature and match its next-token distribution.

    The drafter reads the target's features f_t (plus uniform ±`noise`, EAGLE's robustness
    trick) and token t+1, and predicts f_{t+1}: loss = SmoothL1(f̂_t, f_{t+1}) + cls_weight ·
    soft CE between the target's distribution for token t+2 and lm_head(f̂_t). A position
    counts when token t+2 is assistant-written.
    """

    def __init__(
        self, target: torch.nn.Module, vocab_size: int, noise: float = 0.1, cls_weight: float = 0.1, store=None
    ):
        """store: a FeatureStore of offline lm_head inputs (then only the target's lm_head runs)."""
        self.target, self.vocab_size, self.store = target, vocab_size, store
        self.noise, self.cls_weight = noise, cls_weight
        self.progress_keys = ["loss", "regression", "top1_agreement"]

    def _target_signals(self, batch):
        input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
        if self.store is None:
            return final_hidden_states(self.target, input_ids, attention_mask)
        _, last_hidden = self.store.batch(batch["rows"].tolist(), input_ids.shape[1])  # host sync: disk lookup by row
        features = last_hidden.to(input_ids.device, self.target.get_output_embeddings().weight.dtype)
        return features, stored_logits(self.target, features)

    def __call__(self, model, batch):
        input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
        features, target_logits = self._target_signals(batch)  # (B, T, H), (B, T, V)
        noisy = features + (torch.rand_like(features) * 2 - 1) * self.noise if self.noise else features
        predicted = model(noisy, input_ids, attention_mask)  # (B, T, H): entry t estimates f_{t+1}
        m = (batch["loss_mask"] * attention_mask).bool()[:, 2:]  # (B, T−2)
        guess, truth = predicted[:, :-2][m], features[:, 1:-1][m].to(predicted.dtype)  # (N, H)
        # mean; 0 (not NaN) when empty
        regression = F.smooth_l1_loss(guess, truth, reduction="sum") / max(guess.numel(), 1)
        unwrapped = getattr(model, "module", model)
        q = unwrapped.logits(guess)[:, : self.vocab_size].float().log_softmax(-1)
        p = target_logits[:, 1:-1][m][:, : self.vocab_size].float().softmax(-1)
        classification = -(p * q).sum(-1).mean() if q.shape[0] else q.sum()
        loss = regression + self.cls_weight * classification
        with torch.no_grad():
            agree = (q.argmax(-1) == p.argmax(-1)).float().mean() if q.shape[0] else q.new_zeros(())
        return loss, {
            "loss": loss.detach(),
            "regression": regression.detach(),
            "classification": classification.detach(),
            "top1_agreement": agree,
            "positions": m.sum(),
        }
