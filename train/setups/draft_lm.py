"""The draft LM: a small causal LM distilled into the target's next-token distribution on the
target's own samples, off-policy or on its own drafts (DistillSpec)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Optional

import torch

from distill.targets.load import eos_token_ids, padding_id
from heads.draft_lm import DraftLM
from train.losses import (
    LOSSES,
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
from train.setups.base import Prepared, TrainContext, TrainingSetup, logits_bytes, on_policy


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
        kd_temperature: float = 1.0,
        *,
        acceptance_gamma: int = 4,
        on_policy: Optional[OnPolicy] = None,
        pad_token_id: int = 0,
        eos_ids: frozenset = frozenset(),
    ):
        self.target, self.loss, self.vocab_size = target, loss, vocab_size
        self.jsd_beta, self.kd_temperature, self.acceptance_gamma = jsd_beta, kd_temperature, acceptance_gamma
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
        t = self.kd_temperature
        if self.loss == "al":
            alpha = acceptance_rate((student / t).softmax(-1), (teacher / t).softmax(-1))  # (N,)
            grid = torch.zeros(mask.shape, dtype=alpha.dtype, device=alpha.device).masked_scatter(mask, alpha)
            per_token = acceptance_length_loss(
                sequence_accepted_length(grid, mask, self.acceptance_gamma)[mask], self.acceptance_gamma
            )
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
        drafts = draft_lm_chains(model, batch, anchors, self.acceptance_gamma - 1, self.on_policy, self.vocab_size)
        tokens, parents, valid, node_of = branch_block(ids, attention, anchors, drafts)
        student = tree_logits(model, tokens, parents, valid)
        teacher = score_branches(self.target, tokens, parents, valid)
        rows, where = anchors.nonzero(as_tuple=True)
        nodes = [where + 1] + [n[rows, where] for n in node_of]  # per step: the node whose logits predict it
        q = torch.stack([student[rows, n, : self.vocab_size] for n in nodes]) / self.kd_temperature  # (γ, N, V)
        p = torch.stack([teacher[rows, n, : self.vocab_size] for n in nodes]) / self.kd_temperature
        count = max(len(rows), 1)  # a batch cut before any answer token gives 0, not NaN
        if self.loss == "al":
            expected = chain_accepted_length(acceptance_rate(q.softmax(-1), p.softmax(-1)))  # (N,)
            loss = acceptance_length_loss(expected, self.acceptance_gamma).sum() / count
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


def draft_lm_objective(ctx: TrainContext) -> DraftLMDistillation:
    """The objective from the run's trainer settings (layer skipping fine-tunes its kept layers with it too)."""
    trainer = ctx.cfg.trainer
    return DraftLMDistillation(
        ctx.target,
        trainer.loss,
        len(ctx.tokenizer),
        jsd_beta=trainer.jsd_beta,
        kd_temperature=trainer.kd_temperature,
        acceptance_gamma=trainer.acceptance_gamma,
        on_policy=on_policy(ctx),
        pad_token_id=padding_id(ctx.tokenizer),
        eos_ids=frozenset(eos_token_ids(ctx.target, ctx.tokenizer)),
    )


def _prepare_draft_lm(ctx: TrainContext) -> Prepared:
    cfg = ctx.cfg
    drafter = DraftLM.from_config(cfg.drafter, ctx.target.config, ctx.tokenizer, cfg.target.trust_remote_code)
    return Prepared(drafter, draft_lm_objective(ctx), ctx.dataset)


def meta_draft_lm(cfg, target, config) -> torch.nn.Module:
    """The drafter on the meta device (PARD's drafter is a draft LM too, so it plans with this)."""
    if cfg.drafter.init:  # a pretrained draft LM: plan from its config.json likewise
        from transformers import AutoModelForCausalLM

        from distill.targets.load import target_config

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


SETUP = TrainingSetup(
    prepare=_prepare_draft_lm,
    meta_drafter=meta_draft_lm,
    activations=_activations_draft_lm,
    losses=LOSSES,
    off_policy_only=None,
    on_policy_rollouts=("chains", "answers"),
)
