"""The model card that travels with every exported drafter: the generic card and its shared lines. Each
family's own text lives in its row (heads/families/<kind>.py); heads/families/__init__.py assembles them."""

from __future__ import annotations

import json
from typing import Optional

from heads.formats import ENGINE_NAMES
from heads.load_card import load_section


def render_model_card(provenance: dict, *, library: str, usage: str, details: str, gamma: int) -> str:
    """README.md with HF metadata (YAML front matter), the measured acceptance and the family's sections."""
    ev = provenance.get("eval") or {}
    target = provenance["target"]["name_or_path"]
    kind = provenance["kind"]
    per_pos = ", ".join(f"{a:.2f}" for a in ev.get("per_position_acceptance", []))
    acceptance_row = (
        f"| {ev.get('tau', float('nan')):.3f} | {ev.get('alpha', float('nan')):.3f} "
        f"| {speedup_text(ev)} | {_shape(ev)} | {ev.get('lossless')} |"
    )
    warnings = "".join(f"\n> ⚠️ {w}\n" for w in speed_warnings(ev))
    compared = compared_section(provenance.get("compared"))
    return f"""---
library_name: {library}
pipeline_tag: text-generation
base_model: {json.dumps(target)}
tags:
- speculative-decoding
- drafthub
- {kind.replace("_", "-")}
{_model_index(provenance["model_name"], ev)}---

# {provenance["model_name"]}

A `{kind}` drafter for speculative decoding with target `{target}`, {_origin(provenance)}.

## Measured acceptance (drafthub eval, {ev.get("settings", {}).get("num_prompts", "?")} held-out prompts)

| τ (mean accepted length) | α | speed-up vs autoregressive (95% interval) | γ or tree | lossless |
|---|---|---|---|---|
{acceptance_row}

Timed on {timing_device(ev)}.{_prompts_line(ev)}
{warnings}
Per-position acceptance: {per_pos or "n/a"}.{gamma_line(ev, gamma)}\
{_served_line(ev)}{load_section(ev.get("serving_load"))}
{training_line(provenance.get("training_data"), provenance.get("continues"))}{compared}{details}

{usage}

Provenance (target revision, tokenizer hash, data manifest, resolved recipe) is in `drafthub.json`.
"""


def compared_section(compared: Optional[dict]) -> str:
    """A bake-off's choice: why this drafter, and every contender's figures measured alike (bakeoff.publish=best)."""
    if not compared:
        return ""
    rows = "\n".join(
        f"| `{c['recipe']}` | {c['kind']} | {c['tau']:.3f} | {speedup_text(c)} | {c['lossless']} | "
        f"{'trained' if c.get('trained') else 'training-free'} |"
        for c in compared["contenders"]
    )
    return f"""

## Why this drafter

Chosen by a bake-off on the same held-out prompts (workload `{compared["workload"]}`): {compared["reason"]}.

| contender | family | τ | speed-up (95% interval) | lossless | |
|---|---|---|---|---|---|
{rows}"""


def gamma_line(ev: dict, gamma: int) -> str:
    """The one γ users get (measured, served-checked, in config.json and every snippet), and the sweep's
    fastest beside it, with the setting that would export and check that one where it differs."""
    line = f" Measured and served at `num_speculative_tokens` = {gamma}: the snippets below use it."
    best = ev.get("recommended_num_speculative_tokens")
    if best:
        line += f" Fastest in the γ sweep ({ev.get('recommendation_basis') or 'measured speed-up'}): {best}"
        line += (
            "."
            if best == gamma
            else f"; to export and check that one, re-run with `eval.num_speculative_tokens={best}`."
        )
    return line


def _prompts_line(ev: dict) -> str:
    """Which prompts were measured, and the proof that none was trained on (train/eval_prompts.py)."""
    measured = ev.get("prompts")
    if not measured:
        return ""
    proof = {
        0: f"none of them is among the training prompts (digest {measured.get('training_digest')})",
        None: "no distilled training data was at hand to compare them with",
    }.get(measured.get("overlap"), f"{measured.get('overlap')} of them were trained on")
    return f" Prompts measured: {measured.get('what')}, {measured.get('count')} prompts; {proof}."


def speedup_text(ev: dict, key: str = "speedup", spread_key: str = "speedup_spread") -> str:
    """A speed-up never stands alone: "1.42× (1.31–1.55×)", its 95% interval over prompts beside it."""
    value, spread = ev.get(key), ev.get(spread_key)
    if not isinstance(value, (int, float)):
        return "n/a"
    if not spread:
        return f"{value:.2f}× (no interval recorded; re-run `python -m eval` to measure one)"
    return f"{value:.2f}× ({spread['low']:.2f}–{spread['high']:.2f}×)"


def served_tau_text(served: dict) -> str:
    """A served τ beside drafthub's own on the same prompts, both counted as the engine counts (1 + accepted
    drafts per drafting step), so the two compare; a report's τ (tokens per target forward) does not."""
    tau, ours = served.get("tau"), served.get("ours_tau", (served.get("ours") or {}).get("tau"))
    if not isinstance(tau, (int, float)):
        return "–"
    return f"{tau:.3f}" + (f" (ours {ours:.3f})" if isinstance(ours, (int, float)) else "")


def timing_device(ev: dict) -> str:
    """The device a report's speed-ups were measured on."""
    timing = ev.get("timing") or {}
    return timing.get("device_name") or (ev.get("settings") or {}).get("device") or "an unrecorded device"


def speed_warnings(ev: dict) -> list[str]:
    """What a reader must know before trusting the speed-up: noisy timing, or speculation slowing decoding."""
    out = []
    timing = ev.get("timing") or {}
    if timing.get("noisy"):
        out.append(
            "The timing was noisy (" + "; ".join(timing.get("reasons", [])) + "): the speed-up is not reliable "
            "and γ was recommended from τ and the drafting cost instead."
        )
    speedup = ev.get("speedup")
    if isinstance(speedup, (int, float)) and speedup < 1:
        out.append(
            f"Measured speed-up {speedup:.2f}× on {timing_device(ev)}: speculative decoding with this drafter "
            "was slower than plain decoding there."
        )
    served = ev.get("served") or {}
    if isinstance(served.get("speedup"), (int, float)) and served["speedup"] < 1:
        engine = served_engine(served).split(" ")[0]
        out.append(
            f"Served by {engine} the speed-up was {served['speedup']:.2f}×: slower than {engine} without speculation."
        )
    return out


def served_engine(served: dict) -> str:
    """The engine and version a served check ran on, as users spell it: 'vLLM 0.32.0', 'llama.cpp b…'
    (reports older than the engine field were vLLM's)."""
    engine = served.get("engine", "vllm")
    version = served.get("engine_version") or served.get("vllm_version") or served.get("version") or ""
    return f"{ENGINE_NAMES.get(engine, engine)} {version}".strip()


def _origin(provenance: dict) -> str:
    recipe = provenance.get("recipe")
    if recipe:
        return f"made and measured by drafthub (recipe `{recipe['recipe_name']}`)"
    return "made elsewhere and measured by drafthub (`python -m eval`)"


def training_line(data: dict | None, continues: dict | None = None) -> str:
    """What budget produced the τ above: data size and source, policy, steps (and the training it extends)."""
    if not data:
        return "Training: none (this drafter has no trained weights)."
    extends = ""
    if continues:
        earlier = continues.get("published") or continues["run"]
        extends = f" Continues the training of {earlier} from its step {continues['step']}."
    return (
        f"Training: {data['samples']} samples ({data['source']}), {data['policy']}, "
        f"{data['optimizer_steps']} optimizer steps × {data['sequences_per_step']} sequences.{extends}"
    )


def _model_index(name: str, ev: dict) -> str:
    """HF `model-index` metadata: the eval's τ, α and speed-up, machine-readable on the Hub."""
    metrics = [
        (k, label, ev[k])
        for k, label in (
            ("tau", "mean accepted length τ"),
            ("alpha", "acceptance rate α"),
            ("speedup", "speed-up vs autoregressive"),
        )
        if isinstance(ev.get(k), (int, float))
    ]
    if not metrics:
        return ""
    rows = "".join(f"    - type: {k}\n      name: {label}\n      value: {v:.4f}\n" for k, label, v in metrics)
    return (
        f"model-index:\n- name: {json.dumps(name)}\n  results:\n"
        "  - task:\n      type: text-generation\n      name: speculative decoding\n"
        "    dataset:\n      type: drafthub-eval\n"
        f"      name: held-out prompts ({ev.get('settings', {}).get('num_prompts', '?')})\n"
        f"    metrics:\n{rows}"
    )


def _served_line(ev: dict) -> str:
    """The served check's outcome, when one ran: these very files, served by an engine users deploy."""
    sv = ev.get("served")
    if not sv:
        return ""
    return (
        f"\n\nServed check: {served_engine(sv)} (`{sv['method']}`, γ = {sv['num_speculative_tokens']})"
        f" served these files with τ {sv['tau']:.3f} against drafthub's {sv['ours']['tau']:.3f}"
        " (both as 1 + accepted drafts per step), outputs equal to the"
        f" target's greedy output on {sv['equal_prompts']}/{sv['num_prompts']} prompts: **{sv['verdict']}**."
        + (
            f" Served speed-up over {served_engine(sv).split(' ')[0]} without speculation: {speedup_text(sv)}"
            f" (drafthub's engine on the same prompts: {speedup_text(ev)})."
            if "speedup" in sv
            else ""
        )
    )


def _shape(ev: dict) -> str:
    settings = ev.get("settings", {})
    if settings.get("tree"):
        return f"tree ({ev.get('draft_tokens_per_step', 0):.0f} nodes)"
    return str(settings.get("num_speculative_tokens", "?"))
