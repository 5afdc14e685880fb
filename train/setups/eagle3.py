"""EAGLE-3: a one-layer drafter on the target's fused low/mid/high features, trained by its
training-time test (unrolled steps reading its own outputs) over a reduced draft vocabulary."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from distill.features.capture import layer_features
from heads.eagle import Eagle3Drafter, eagle3_layer_ids
from heads.vocab import build_draft_vocab
from train.checkpoint import best_weights
from train.losses import acceptance_length_loss, acceptance_rate, chain_accepted_length
from train.on_policy import OnPolicy, branch_block, score_branches
from train.setups.base import (
    LOGITS_CHUNK,
    Prepared,
    TrainContext,
    TrainingSetup,
    draft_vocab,
    held_out_selection,
    logits_bytes,
    offline_features,
    on_policy,
    stored_argmax,
    stored_logits,
)
from train.sharded_target import whole_embeddings


class Eagle3TrainingTimeTest:
    """EAGLE-3's training-time test on a frozen target's own samples, features computed online.

    Step j (of `ttt_steps`) at position t predicts token t+j+2 after reading the drafter's own step
    j−1 output; its target is the target's distribution for that token (logits at t+j+1)
    restricted to the draft vocabulary and renormalised; loss_j is the soft cross-entropy, the
    total Σ_j step_decay^j · loss_j (top_k > 0: the target's distribution cut to its top k; loss `ce`: the
    sampled token as a hard label, no teacher). A position counts when its token is assistant-written. Logged per
    step: accuracy (the drafter's argmax, mapped to a target id, equals the target's argmax) and
    `sim_tau` = 1 + Σ_j Π_{i≤j} acc_i, the accepted length a chain of `ttt_steps` would reach if
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
        ttt_steps: int = 7,
        step_decay: float = 0.8,
        store=None,
        *,
        loss: str = "fkl",
        on_policy: Optional[OnPolicy] = None,
        top_k: int = 0,
    ):
        """store: a distill.features.store.FeatureStore for offline features (then only the target's lm_head runs)."""
        self.target, self.layer_ids, self.store = target, list(layer_ids), store
        self.ttt_steps, self.step_decay = ttt_steps, step_decay
        self.draft_ids = draft_ids  # (D,) target id of each draft id
        self.loss, self.on_policy, self.top_k = loss, on_policy, top_k
        if loss == "ce":  # target id → draft id (−1: outside the draft vocabulary), for the sampled tokens' labels
            self.to_draft = torch.full((target.config.vocab_size,), -1, dtype=torch.long)
            self.to_draft[draft_ids] = torch.arange(len(draft_ids))
        self.progress_keys = ["loss", "sim_tau", "step0_acc"]
        self._argmax: dict[int, torch.Tensor] = {}  # dataset row → the target's argmax at each of its positions

    def _target_signals(self, batch):
        """(B, T, F) features and (B, T, V) logits: from a target forward, or from disk + the lm_head."""
        input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
        if self.store is None:
            return layer_features(self.target, input_ids, attention_mask, self.layer_ids)
        # host sync: disk lookup by row
        features, last_hidden = self.store.batch(batch["rows"].tolist(), input_ids.shape[1])
        return features.to(input_ids.device), stored_logits(self.target, last_hidden.to(input_ids.device))

    def _target_view(self, batch):
        """What the loss reads of the target at every position: (B, T, F) features, its logits over the draft
        vocabulary (B, T, D), its argmax over its whole vocabulary (B, T), and its whole logits (B, T, V) where
        loss al needs them (else None).

        With offline features and loss fkl only the draft vocabulary's rows of the lm_head run in a step (a sixth
        of the lm_head for SmolLM2's 49k vocabulary), only at the positions the loss reads, and each row's
        whole-vocabulary argmax is computed once, the first time the row is read, and kept: a step then costs half
        as much on a CPU."""
        input_ids = batch["input_ids"]
        draft_ids = self.draft_ids.to(input_ids.device)
        if self.store is None or self.loss == "al":
            features, logits = self._target_signals(batch)
            return features, logits[..., draft_ids], logits.argmax(-1), logits
        rows = batch["rows"].tolist()  # host sync: disk lookup by row
        features, last_hidden = self.store.batch(rows, input_ids.shape[1])
        last_hidden = last_hidden.to(input_ids.device)
        # the target's logits are read only at positions whose next token a loss counts: computed there alone
        read = F.pad((batch["loss_mask"] * batch["attention_mask"]).bool()[:, 1:], (0, 1))
        new = [i for i, r in enumerate(rows) if r not in self._argmax]
        # in every step, even with no new row: a sharded target gathers its lm_head in each call, collectively
        top = torch.zeros(len(new), read.shape[1], dtype=torch.long, device=read.device)
        top[read[new]] = stored_argmax(self.target, last_hidden[new][read[new]])
        self._argmax.update({rows[i]: top[k].cpu() for k, i in enumerate(new)})
        width = input_ids.shape[1]
        top = torch.stack([F.pad(self._argmax[r][:width], (0, width - min(width, len(self._argmax[r])))) for r in rows])
        if self.loss == "ce":  # hard labels: no teacher distribution to compute
            return features.to(input_ids.device), None, top.to(input_ids.device), None
        needed = stored_logits(self.target, last_hidden[read], rows=draft_ids)
        draft_logits = needed.new_zeros(*read.shape, len(draft_ids))
        draft_logits[read] = needed
        return features.to(input_ids.device), draft_logits, top.to(input_ids.device), None

    def _teacher(self, p_draft: torch.Tensor) -> torch.Tensor:
        """(N, D) the target's distribution over the draft vocabulary, or over its top_k tokens renormalised."""
        if not self.top_k:
            return p_draft.float().softmax(-1)
        top = p_draft.float().topk(min(self.top_k, p_draft.shape[-1]), dim=-1)
        return torch.zeros_like(p_draft, dtype=torch.float32).scatter_(-1, top.indices, top.values.softmax(-1))

    def __call__(self, model, batch):
        input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
        features, target_draft, target_top, target_logits = self._target_view(batch)
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

            outputs = model(features, input_ids, attention_mask, self.ttt_steps, feed)
        else:  # logits only where the loss reads them (row-major, as [m] below takes them)
            outputs = model(features, input_ids, attention_mask, self.ttt_steps, counted=counts)
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
                p_draft, p_top = p_logits[:, draft_ids], p_logits.argmax(-1)
            else:  # the target's logits for token t+j+2: over the draft vocabulary (N, D), its argmax, all (N, V)
                window = slice(j + 1, j + 1 + span)
                p_draft = None if target_draft is None else target_draft[:, window][m]
                p_top = target_top[:, window][m]
                p_logits = None if target_logits is None else target_logits[:, window][m]
            q = (logits if logits.dim() == 2 else logits[:, :span][m]).float().log_softmax(-1)  # (N, D)
            if self.loss == "al":
                alpha = acceptance_rate(q.exp(), p_logits.float().softmax(-1)[:, draft_ids])
                alphas.append(torch.zeros(m.shape, device=alpha.device).masked_scatter(m, alpha))
                loss_j = q.new_zeros(())
            elif self.loss == "ce":  # the sampled token t+j+2 as a hard label, where the draft vocabulary holds it
                label = self.to_draft.to(q.device)[input_ids[:, j + 2 :][m]]
                kept = label >= 0
                loss_j = F.nll_loss(q[kept], label[kept], reduction="sum") / max(q.shape[0], 1)
            else:
                loss_j = -(self._teacher(p_draft) * q).sum(-1).sum() / max(q.shape[0], 1)
            total = total + self.step_decay**j * loss_j
            with torch.no_grad():
                hit = (draft_ids[q.argmax(-1)] == p_top).float()
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
        ttt_steps=cfg.drafter.ttt_steps,
        step_decay=cfg.drafter.step_decay,
        store=store,
        loss=cfg.trainer.loss,
        on_policy=on_policy(ctx),
        top_k=cfg.trainer.kd_top_k,
    )
    dataset, select = held_out_selection(ctx, objective)
    return Prepared(drafter, objective, dataset, select=select, state={"draft_vocab": report})


def finish_eagle3(drafter: Eagle3Drafter, prepared: Prepared, ctx: TrainContext) -> dict:
    """The draft vocabulary's report, and the best held-out checkpoint loaded (P-EAGLE finishes alike)."""
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


SETUP = TrainingSetup(
    prepare=_prepare_eagle3,
    meta_drafter=_meta_eagle3,
    activations=_activations_eagle3,
    finish=finish_eagle3,
    unroll=lambda d: d.ttt_steps,
    feature_ids=lambda d, config: eagle3_layer_ids(d, config.num_hidden_layers),
    # fkl: soft cross-entropy against the target (KL up to its entropy; trainer.kd_top_k cuts it to the top k);
    # ce: the sampled token as a hard label (no teacher); al: expected accepted length
    losses=("fkl", "ce", "al"),
    top_k_targets=True,
    off_policy_only=None,
    held_out=lambda d: {"drafter.select_samples": d.select_samples},
    # stored features with fkl or ce: the whole vocabulary's logits only for the argmax, LOGITS_CHUNK positions at a
    # time (_target_view); online features or loss al: the target's forward makes them for the whole batch
    whole_logits=lambda cfg, tokens: (
        tokens if cfg.drafter.features == "online" or cfg.trainer.loss == "al" else min(tokens, LOGITS_CHUNK)
    ),
)
