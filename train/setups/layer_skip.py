"""Layer skipping (self-speculation): search which target layers to skip on held-out samples, then
optionally fine-tune the kept layers' copy by distillation; the eval stage measures the chosen drafter."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from distill.targets.load import padding_id
from eval.metrics import predicted_speedup
from heads.layer_skip import LayerSkipDrafter, decoder_layers, skipped_config, skipping
from train.data import collate
from train.losses import LOSSES
from train.setups.base import Prepared, TrainContext, TrainingSetup, hold_out, logits_bytes
from train.setups.draft_lm import draft_lm_objective

# --- the skip search --------------------------------------------------------------------------


@dataclass
class Candidate:
    skipped_layers: list[int]
    agreement: float  # α: teacher-forced top-1 agreement with the full target on answer tokens
    cost_ratio: float  # c: decode forward time with these layers skipped ÷ the full target's
    predicted_speedup: float


@dataclass
class SearchResult:
    best: Candidate
    seconds: float
    evaluations: int
    trajectory: list[Candidate] = field(default_factory=list)  # the best candidate of each greedy round

    def summary(self) -> dict:
        return {
            "skipped_layers": self.best.skipped_layers,
            "agreement": round(self.best.agreement, 4),
            "cost_ratio": round(self.best.cost_ratio, 4),
            "predicted_speedup": round(self.best.predicted_speedup, 4),
            "search_seconds": round(self.seconds, 1),
            "evaluations": self.evaluations,
            "trajectory": [asdict(c) for c in self.trajectory],
        }


def _logits(model: nn.Module, batch: dict) -> torch.Tensor:
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits


@torch.no_grad()
def greedy_agreement(target: nn.Module, batches: list[dict], skip: list[int], reference: list[torch.Tensor]) -> float:
    """Fraction of answer positions where the skipped target's argmax equals the full target's.

    Args:
        batches: [{"input_ids": (B, T), "attention_mask": (B, T), "loss_mask": (B, T)}]
        reference: per batch, the full target's argmax (B, T−1) at the positions predicting tokens 1..T−1.
    """
    agree = counted = 0
    with skipping(target, skip):
        for batch, full in zip(batches, reference):
            logits = _logits(target, batch)
            answer = batch["loss_mask"][:, 1:].bool()  # positions predicting an answer token
            agree += int(((logits[:, :-1].argmax(-1) == full) & answer).sum())  # host sync: once per batch
            counted += int(answer.sum())  # host sync
    return agree / max(counted, 1)


@torch.no_grad()
def decode_seconds(target: nn.Module, skip: list[int], context: int = 64, repeats: int = 12) -> float:
    """Median time of one cached single-token forward of the target with layers `skip` left out.

    Kept layers keep their original cache index, so the cache is built fresh for each measurement.
    """
    from transformers import DynamicCache

    device = next(target.parameters()).device
    ids = torch.randint(0, target.config.vocab_size, (1, context + 1), device=device)
    timings = []
    with skipping(target, skip):
        for _ in range(repeats):
            cache = DynamicCache(config=target.config)
            target(input_ids=ids[:, :context], past_key_values=cache, use_cache=True)
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # host sync: the timing needs finished kernels
            t0 = time.perf_counter()
            target(input_ids=ids[:, context:], past_key_values=cache, use_cache=True)
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # host sync
            timings.append(time.perf_counter() - t0)
    return sorted(timings)[len(timings) // 2]


def search_skip_layers(
    target: nn.Module, batches: list[dict], *, num_speculative_tokens: int, max_evaluations: int
) -> SearchResult:
    """Greedy search for the skip set with the highest predicted speed-up at γ = num_speculative_tokens.

    Each candidate skip set is scored on held-out distilled samples (the target's own answers):
    α = the fraction of answer positions where the skipped target's argmax equals the full target's
    (teacher-forced, one batched forward, no KV cache), and c = the measured decode cost of a model
    with that many layers ÷ the full target's. The predicted speed-up at γ is Leviathan et al.'s
    (1 − α^(γ+1)) / ((1 − α)(γc + 1)) (eval/metrics.py). Starting from no skipped layer, each round
    adds the layer whose skipping predicts the highest speed-up; the search stops when no addition
    beats the best set so far or the evaluation budget is spent, and returns the best set seen
    (SWIFT's layer-set search, Xia et al. 2024, done greedily rather than by Bayesian optimisation).

    Args:
        batches: held-out distilled samples, collated (see greedy_agreement).
        max_evaluations: candidate sets scored at most (each: one forward over `batches`).
    """
    t0 = time.perf_counter()
    num_layers = len(decoder_layers(target))
    with torch.no_grad():
        reference = [_logits(target, b)[:, :-1].argmax(-1) for b in batches]
    # decode cost depends on how many layers run, not which: measure once per depth, interleaved with the full one
    full_seconds = decode_seconds(target, [])
    cost: dict[int, float] = {}

    def cost_ratio(kept: int) -> float:
        if kept not in cost:
            cost[kept] = decode_seconds(target, list(range(num_layers - kept))) / full_seconds
        return cost[kept]

    def score(skip: list[int]) -> Candidate:
        alpha = min(greedy_agreement(target, batches, skip, reference), 1 - 1e-6)
        c = cost_ratio(num_layers - len(skip))
        return Candidate(sorted(skip), alpha, c, predicted_speedup(alpha, num_speculative_tokens, c))

    evaluations, current, best, trajectory = 0, [], None, []
    while len(current) < num_layers - 1 and evaluations < max_evaluations:
        options = [layer for layer in range(num_layers) if layer not in current][: max_evaluations - evaluations]
        scored = [score(current + [layer]) for layer in options]
        evaluations += len(scored)
        round_best = max(scored, key=lambda c: c.predicted_speedup)
        trajectory.append(round_best)
        if best is not None and round_best.predicted_speedup <= best.predicted_speedup:
            break  # skipping one more layer no longer pays
        best, current = round_best, round_best.skipped_layers
    return SearchResult(best, time.perf_counter() - t0, evaluations, trajectory)


# --- the training setup -----------------------------------------------------------------------


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
                    rows["input_ids"], rows["loss_mask"], trainer.max_seq_len, padding_id(ctx.tokenizer)
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
    from distill.targets.load import target_config

    if not cfg.drafter.fine_tune_steps:
        return 0.0, 0.0  # the search runs the target without gradients
    layers = target_config(cfg.target.name_or_path, cfg.target.trust_remote_code).num_hidden_layers
    return 0.0, (layers - len(_planned_skip(cfg))) * layer + logits_bytes(tokens, vocab)


SETUP = TrainingSetup(
    prepare=_prepare_layer_skip,
    held_out=lambda d: {"drafter.search_samples": d.search_samples},
    meta_drafter=_meta_layer_skip,
    activations=_activations_layer_skip,
    finish=_finish_layer_skip,
    losses=LOSSES,
    off_policy_only="its kept layers are fine-tuned on the target's answers only",
    whole_target_only="the drafter is a copy of the target's kept layers",
)
