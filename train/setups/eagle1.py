"""EAGLE-1: a one-layer drafter trained to regress the target's next last-layer feature and match
its next-token distribution, on features computed online or read from an offline store."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from distill.features.capture import final_hidden_states
from heads.eagle1 import Eagle1Drafter
from train.setups.base import Prepared, TrainContext, TrainingSetup, logits_bytes, offline_features, stored_logits
from train.sharded_target import whole_embeddings


class Eagle1Distillation:
    """EAGLE-1: regress the target's next final feature and match its next-token distribution.

    The drafter reads the target's features f_t (plus uniform ±`feature_noise`, EAGLE's robustness
    trick) and token t+1, and predicts f_{t+1}: loss = SmoothL1(f̂_t, f_{t+1}) + cls_weight ·
    soft CE between the target's distribution for token t+2 and lm_head(f̂_t). A position
    counts when token t+2 is assistant-written.
    """

    def __init__(
        self,
        target: torch.nn.Module,
        vocab_size: int,
        feature_noise: float = 0.1,
        cls_weight: float = 0.1,
        store=None,
    ):
        """store: a FeatureStore of offline lm_head inputs (then only the target's lm_head runs)."""
        self.target, self.vocab_size, self.store = target, vocab_size, store
        self.feature_noise, self.cls_weight = feature_noise, cls_weight
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
        noisy = features + (torch.rand_like(features) * 2 - 1) * self.feature_noise if self.feature_noise else features
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


def _prepare_eagle1(ctx: TrainContext) -> Prepared:
    d = ctx.cfg.drafter
    store = offline_features(ctx, [])  # only the lm_head inputs
    objective = Eagle1Distillation(
        ctx.target, len(ctx.tokenizer), feature_noise=d.feature_noise, cls_weight=d.cls_weight, store=store
    )
    with whole_embeddings(ctx.target):
        drafter = Eagle1Drafter.from_target(d, ctx.target)
    return Prepared(drafter, objective, ctx.dataset)


def _activations_eagle1(cfg, *, tokens, hidden, layer, vocab, act_bytes, target_bytes) -> tuple[float, float]:
    return 0.0, 2 * layer + logits_bytes(tokens, vocab)


SETUP = TrainingSetup(
    prepare=_prepare_eagle1,
    meta_drafter=lambda cfg, target, config: Eagle1Drafter.from_target(cfg.drafter, target),
    activations=_activations_eagle1,
    feature_ids=lambda d, config: [],
    # fkl: its fixed objective, feature regression plus soft cross-entropy
    off_policy_only="on-policy training is implemented for EAGLE-3, not for EAGLE-1's feature regression",
)
