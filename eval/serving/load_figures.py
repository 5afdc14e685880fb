"""The figures of a load sweep, from the load generator's results: per concurrency level, both sides' throughput and
latency, the drafter's speed-ups with their intervals, its served acceptance; and the break-even concurrency.

A level's results are `vllm bench serve` result dicts (with its per-request lists: output_lens, ttfts, latencies),
one per repeat and side. Requests pair up across the sides by position: the same prompt, the same repeat.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from eval.timing import LEVEL, RESAMPLES, contain, speedup_spread


def _tpots(result: dict) -> list[float]:
    """Each request's time per output token after the first (seconds), as the load generator defines TPOT."""
    return [
        (lat - ttft) / (n - 1)
        for n, ttft, lat in zip(result["output_lens"], result["ttfts"], result["latencies"])
        if n > 1
    ]


def _side(results: list[dict]) -> dict:
    tokens = sum(r["total_output_tokens"] for r in results)
    tpot = np.asarray([t for r in results for t in _tpots(r)]) * 1e3
    ttft = np.asarray([t for r in results for t in r["ttfts"]]) * 1e3
    return {
        "output_tokens_per_second": tokens / sum(r["duration"] for r in results),
        "tpot_ms": {"median": float(np.median(tpot)), "p90": float(np.percentile(tpot, 90))},
        "ttft_ms": {"median": float(np.median(ttft)), "p90": float(np.percentile(ttft, 90))},
        "requests": sum(r["completed"] for r in results),
        "output_tokens": tokens,
    }


def median_ratio_interval(base: list[float], spec: list[float]) -> dict:
    """Bootstrap interval of median(base) ÷ median(spec) over paired requests (seeded, as eval/timing.py's)."""
    b, s = np.asarray(base, float), np.asarray(spec, float)
    picks = np.random.default_rng(0).integers(0, len(b), size=(RESAMPLES, len(b)))
    boot = np.median(b[picks], axis=1) / np.median(s[picks], axis=1)
    tail = (1 - LEVEL) / 2 * 100
    return {"low": float(np.percentile(boot, tail)), "high": float(np.percentile(boot, 100 - tail)), "level": LEVEL}


def served_acceptance(results: list[dict]) -> dict:
    """τ and per-position acceptance over the speculative side's runs, from the server's own counters."""
    drafts = sum(r.get("spec_decode_num_drafts", 0) for r in results)
    if not drafts:
        return {"tau": None, "per_position_acceptance": [], "drafts": 0}
    accepted = sum(r["spec_decode_accepted_tokens"] for r in results)
    per_pos = np.zeros(max(len(r.get("spec_decode_per_position_acceptance_rates", [])) for r in results))
    for r in results:
        rates = r.get("spec_decode_per_position_acceptance_rates", [])
        per_pos[: len(rates)] += r["spec_decode_num_drafts"] * np.asarray(rates)  # back to accepted counts
    per_pos = [float(a) for a in per_pos / drafts]
    return {"tau": 1 + accepted / drafts, "per_position_acceptance": per_pos, "drafts": drafts}


def level_figures(concurrency: int, spec: list[dict], base: list[dict], limit: Optional[int] = None) -> dict:
    """One concurrency level: both sides, the speed-ups (throughput; TPOT = base median ÷ spec median) and
    whether the drafter pays there (both above 1). limit: the servers' max_num_seqs where drafthub set it."""
    with_, without = _side(spec), _side(base)
    throughput = with_["output_tokens_per_second"] / without["output_tokens_per_second"]
    tpot = without["tpot_ms"]["median"] / with_["tpot_ms"]["median"]
    pairs = [(s, b) for rs, rb in zip(spec, base) for s, b in zip(_request_rows(rs), _request_rows(rb))]
    spec_rows, base_rows = [s for s, _ in pairs], [b for _, b in pairs]
    spread = speedup_spread(*zip(*spec_rows), *zip(*base_rows))
    # The bootstrap resamples requests, whose Σ tokens ÷ Σ latency ratio differs from the wall-clock throughput ratio
    # by each run's ramp-up and drain: its relative spread is put around the throughput ratio, so the interval is
    # the point estimate's own (it held 0.592–0.597 around a 0.589 throughput ratio before)
    scale = throughput / (_tokens_per_latency(spec_rows) / _tokens_per_latency(base_rows))
    tpot_pairs = [(sb, ss) for rs, rb in zip(spec, base) for ss, sb in zip(_tpots(rs), _tpots(rb))]
    tpot_spread = median_ratio_interval(*zip(*tpot_pairs))
    return {
        "concurrency": concurrency,
        "speculative": with_,
        "no_speculation": without,
        "throughput_speedup": throughput,
        "throughput_speedup_interval": _around(throughput, spread["low"] * scale, spread["high"] * scale),
        "tpot_speedup": tpot,
        "tpot_speedup_interval": _around(tpot, tpot_spread["low"], tpot_spread["high"]),
        "pays": throughput > 1 and tpot > 1,
        **{f"served_{k}": v for k, v in served_acceptance(spec).items()},
        **server_concurrency(concurrency, spec, base, limit),
    }


def server_concurrency(concurrency: int, spec: list[dict], base: list[dict], limit: Optional[int] = None) -> dict:
    """How many requests each server ran at once (eval/serving/concurrency.py), and `capped_at`: the lower peak
    where either side ran fewer than the level asked, so the level timed a queue (None: it ran the level).

    limit: the max_num_seqs drafthub started both servers with; then only it caps a level. The polled peak is a lower
    bound (short requests can finish between polls): it decides only for a deployed server, whose limit is private."""
    peaks = {}
    for side, results in (("speculative", spec), ("no_speculation", base)):
        seen = [r["peak_running"] for r in results if r.get("peak_running")]  # 0: no poll caught a request
        peaks[side] = max(seen) if seen else None
    if limit is not None:
        return {"peak_running": peaks, "capped_at": limit if limit < concurrency else None}
    below = [p for p in peaks.values() if p is not None and p < concurrency]
    return {"peak_running": peaks, "capped_at": min(below) if below else None}


def _around(point: float, low: float, high: float) -> dict:
    low, high = contain(point, low, high)
    return {"low": low, "high": high, "level": LEVEL}


def _tokens_per_latency(rows: list[tuple[int, float]]) -> float:
    return sum(tokens for tokens, _ in rows) / sum(latency for _, latency in rows)


def _request_rows(result: dict) -> list[tuple[int, float]]:
    return list(zip(result["output_lens"], result["latencies"]))


def break_even(all_levels: list[dict]) -> dict:
    """The highest measured concurrency up to which every level speeds up both throughput and TPOT.

    `between`: where the drafter stops paying lies between that level and the next one measured (None past the
    last: it pays at every measured load; concurrency None: it never pays, not even at the lowest). A level the
    server did not run at once (`capped_at`) timed its queue: it is named in the verdict, not judged."""
    levels = [lv for lv in all_levels if not lv.get("capped_at")]
    capped = [lv for lv in all_levels if lv.get("capped_at")]
    paying = 0
    while paying < len(levels) and levels[paying]["pays"]:
        paying += 1
    last: Optional[dict] = levels[paying - 1] if paying else None
    following = levels[paying]["concurrency"] if paying < len(levels) else None
    if not levels:
        verdict = "no level judged"
    elif last is None:
        verdict = f"never pays: slower already at {levels[0]['concurrency']} concurrent request(s)"
    elif following is None:
        verdict = f"pays at every measured load (up to {last['concurrency']} concurrent requests)"
    else:
        verdict = f"pays up to {last['concurrency']} concurrent requests, not at {following}"
    if capped:
        verdict += "; not judged (the server ran fewer at once, so they timed its queue): " + ", ".join(
            f"{lv['concurrency']} (ran ≤ {lv['capped_at']})" for lv in capped
        )
    return {
        "concurrency": last["concurrency"] if last else None,
        "between": [last["concurrency"] if last else 0, following],
        "throughput_speedup": last["throughput_speedup"] if last else None,
        "throughput_speedup_interval": last["throughput_speedup_interval"] if last else None,
        "tpot_speedup": last["tpot_speedup"] if last else None,
        "tpot_speedup_interval": last["tpot_speedup_interval"] if last else None,
        "judged": bool(levels),
        "verdict": verdict,
    }
