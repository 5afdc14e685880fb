"""Model cards that travel with every exported drafter: the generic card, and each family's sections
(referenced from the family table, heads/families.py, which assembles them)."""

from __future__ import annotations

import json


def render_model_card(provenance: dict, *, library: str, usage: str, details: str) -> str:
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
Per-position acceptance: {per_pos or "n/a"}. Recommended `num_speculative_tokens`
({ev.get("recommendation_basis") or "fastest in the γ sweep"}): {ev.get("recommended_num_speculative_tokens", "n/a")}.\
{_served_line(ev)}
{training_line(provenance.get("training_data"))}{details}

{usage}

Provenance (target revision, tokenizer hash, data manifest, resolved recipe) is in `drafthub.json`.
"""


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
        out.append(f"Served by vLLM the speed-up was {served['speedup']:.2f}×: slower than vLLM without speculation.")
    return out


def _origin(provenance: dict) -> str:
    recipe = provenance.get("recipe")
    if recipe:
        return f"made and measured by drafthub (recipe `{recipe['recipe_name']}`)"
    return "made elsewhere and measured by drafthub (`python -m eval`)"


def training_line(data: dict | None) -> str:
    """What budget produced the τ above: data size and source, policy, steps."""
    if not data:
        return "Training: none (this drafter has no trained weights)."
    return (
        f"Training: {data['samples']} samples ({data['source']}), {data['policy']}, "
        f"{data['optimizer_steps']} optimizer steps × {data['sequences_per_step']} sequences."
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
    """The served check's outcome, when one ran: these very files, served by vLLM."""
    sv = ev.get("served")
    if not sv:
        return ""
    return (
        f"\n\nServed check: vLLM {sv['vllm_version']} (`{sv['method']}`, γ = {sv['num_speculative_tokens']})"
        f" served these files with τ {sv['tau']:.3f} against drafthub's {sv['ours']['tau']:.3f}"
        " (both as 1 + accepted drafts per step), outputs equal to the"
        f" target's greedy output on {sv['equal_prompts']}/{sv['num_prompts']} prompts: **{sv['verdict']}**."
        + (
            f" Served speed-up over vLLM without speculation: {speedup_text(sv)}"
            f" (drafthub's engine on the same prompts: {speedup_text(ev)})."
            if "speedup" in sv
            else ""
        )
    )


def eagle3_usage(target: str, gamma: int, provenance: dict) -> str:
    recommended = (provenance.get("eval") or {}).get("recommended_num_speculative_tokens")
    gamma = recommended or provenance.get("drafter_config", {}).get("num_speculative_tokens") or gamma
    return f"""## Use it

vLLM serves this directory as is (speculators format; the method is read from `config.json`):

```python
from vllm import LLM
llm = LLM(model="{target}", speculative_config={{"model": "THIS_DIRECTORY", "num_speculative_tokens": {gamma}}})
```

SGLang (the `sglang/` subdirectory, `LlamaForCausalLMEagle3` layout):

```bash
python -m sglang.launch_server --model-path {target} --speculative-algorithm EAGLE3 \\
  --speculative-draft-model-path THIS_DIRECTORY/sglang --speculative-num-steps {gamma} \\
  --speculative-eagle-topk 1 --speculative-num-draft-tokens {gamma + 1}
```

drafthub's engine (chains or EAGLE-2 dynamic trees, lossless):
`python -m eval drafter_dir=THIS_DIRECTORY prompts=PROMPTS.jsonl out_dir=OUT eval.tree=dynamic`."""


def eagle1_usage(target: str, gamma: int, provenance: dict) -> str:
    return f"""## Use it

vLLM (EAGLE method; the target's lm_head and embeddings are shared, so none ships here):

```python
from vllm import LLM
llm = LLM(model="{target}",
          speculative_config={{"method": "eagle", "model": "THIS_DIRECTORY", "num_speculative_tokens": {gamma}}})
```

drafthub's engine: `python -m eval drafter_dir=THIS_DIRECTORY prompts=PROMPTS.jsonl out_dir=OUT`."""


def medusa_usage(target: str, gamma: int, provenance: dict) -> str:
    heads = provenance["drafter_config"]["num_heads"]
    spec = f'{{"method": "medusa", "model": "THIS_DIRECTORY", "num_speculative_tokens": {heads}}}'
    return f"""## Use it

vLLM (Medusa method: a chain of every head's top-1, so γ is the head count):

```python
from vllm import LLM
llm = LLM(model="{target}", speculative_config={spec})
```

drafthub's engine (chains, or the token tree in `medusa_tree.json`, lossless):
`python -m eval drafter_dir=THIS_DIRECTORY prompts=PROMPTS.jsonl out_dir=OUT eval.tree=drafter`.
transformers' `generate` has no Medusa support."""


def draft_lm_usage(target: str, gamma: int, provenance: dict) -> str:
    return f"""## Use it

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
target = AutoModelForCausalLM.from_pretrained("{target}")
draft = AutoModelForCausalLM.from_pretrained("THIS_DIRECTORY")
tok = AutoTokenizer.from_pretrained("{target}")
ids = tok.apply_chat_template([{{"role": "user", "content": "..."}}], add_generation_prompt=True, return_tensors="pt")
out = target.generate(ids, assistant_model=draft, max_new_tokens=128)
```

vLLM: `speculative_config={{"method": "draft_model", "model": "THIS_DIRECTORY", "num_speculative_tokens": {gamma}}}`."""


def pard_usage(target: str, gamma: int, provenance: dict) -> str:
    settings = provenance.get("drafter_config") or {}
    return f"""## Use it

A PARD drafter proposes the whole block of {gamma} tokens in one forward: after the target's bonus
token it reads {gamma - 1} copies of the mask token `pard_token` = {settings.get("pard_token")} (in
`config.json`). vLLM:

```python
from vllm import LLM
llm = LLM(model="{target}", speculative_config={{"method": "draft_model", "model": "THIS_DIRECTORY",
          "parallel_drafting": True, "num_speculative_tokens": {gamma}}})
```

It was trained for blocks of up to {settings.get("max_draft_tokens")} tokens; keep `num_speculative_tokens`
at or below that. Without `parallel_drafting` vLLM runs it as an ordinary draft model (one forward per
token), and so does transformers' `assistant_model`."""


def peagle_usage(target: str, gamma: int, provenance: dict) -> str:
    settings = provenance.get("drafter_config") or {}
    k = settings.get("max_draft_tokens")
    gamma = min(gamma, k) if isinstance(k, int) else gamma
    return f"""## Use it

A P-EAGLE drafter is an EAGLE-3 head that proposes all {gamma} tokens in one forward: after the
bonus slot it reads {gamma - 1} mask slots (mask token id {settings.get("mask_token_id")}, hidden
`mask_hidden`). vLLM serves this directory as is (speculators format, `speculators_model_type: peagle`
turns on parallel drafting):

```python
from vllm import LLM
llm = LLM(model="{target}", speculative_config={{"method": "eagle3", "model": "THIS_DIRECTORY",
          "parallel_drafting": True, "num_speculative_tokens": {gamma}}})
```

It was trained for up to {k} drafts per forward; keep `num_speculative_tokens` at or below that.
drafthub's engine (chains, lossless): `python -m eval drafter_dir=THIS_DIRECTORY prompts=PROMPTS.jsonl out_dir=OUT`."""


def ngram_usage(target: str, gamma: int, provenance: dict) -> str:
    settings = provenance.get("drafter_config") or {}
    lo, hi = settings.get("prompt_lookup_min"), settings.get("prompt_lookup_max")
    return f"""## Use it

Prompt lookup needs no weights: these are settings (`config.json`). vLLM:

```python
from vllm import LLM
llm = LLM(model="{target}", speculative_config={{"method": "ngram", "prompt_lookup_min": {lo},
          "prompt_lookup_max": {hi}, "num_speculative_tokens": {gamma}}})
```

transformers: `target.generate(ids, prompt_lookup_num_tokens={gamma}, max_matching_ngram_size={hi})`.
drafthub's engine: `python -m eval drafter_dir=THIS_DIRECTORY prompts=PROMPTS.jsonl out_dir=OUT`."""


def suffix_usage(target: str, gamma: int, provenance: dict) -> str:
    config = provenance.get("drafter_config") or {}
    spec = {"method": "suffix", **{k: v for k, v in config.items() if k.startswith("suffix_decoding_")}}
    return f"""## Use it

Suffix decoding needs no weights: these are settings (`config.json`). vLLM drafts with arctic-inference
(`pip install arctic-inference==0.1.1`, built from source):

```python
from vllm import LLM
llm = LLM(model="{target}", speculative_config={ {**spec, "num_speculative_tokens": gamma}!r})
```

drafthub's engine: `python -m eval drafter_dir=THIS_DIRECTORY prompts=PROMPTS.jsonl out_dir=OUT`."""


def lookahead_usage(target: str, gamma: int, provenance: dict) -> str:
    settings = provenance.get("drafter_config") or {}
    return f"""## Use it

Lookahead decoding needs no weights: these are settings (`config.json`: window {settings.get("window_size")},
n-gram size {settings.get("ngram_size")}, {settings.get("max_verify_ngrams")} verified n-grams per step).
vLLM and SGLang have no lookahead method, so serve it with drafthub's engine:
`python -m eval drafter_dir=THIS_DIRECTORY prompts=PROMPTS.jsonl out_dir=OUT`, or with the
LookaheadDecoding reference implementation (hao-ai-lab/LookaheadDecoding) and the same W, N, G."""


def layer_skip_details(provenance: dict) -> str:
    """Which target layers the drafter skips, and how they were chosen."""
    record = provenance.get("drafter_config") or {}
    search = provenance.get("layer_skip_search") or {}
    how = (
        f"chosen by a greedy search on held-out distilled samples in {search['search_seconds']:.0f} s "
        f"(predicted speed-up {search['predicted_speedup']:.2f}× at agreement {search['agreement']:.3f}, "
        f"cost ratio {search['cost_ratio']:.2f})"
        if search.get("search_seconds") is not None
        else "set by hand"
    )
    return f"""

## Layer skipping

This drafter is the target itself without decoder layers {record.get("skipped_layers")} of
{record.get("target_num_hidden_layers")} ({how}); embeddings, final norm and lm_head are the
target's. It is a plain causal LM: any draft-model speculative decoding loads it."""


def eagle3_details(provenance: dict) -> str:
    """Fused target layers and the draft vocabulary's coverage."""
    vocab, drafter = provenance.get("draft_vocab"), provenance.get("drafter_config") or {}
    if not vocab:
        return ""
    return f"""

Target layers fused: {drafter.get("layer_ids")} (HF `output_hidden_states` indices). Draft vocabulary:
{vocab["draft_vocab_size"]} tokens, covering {vocab["coverage"]:.1%} of the distilled answers' tokens."""


def medusa_details(provenance: dict) -> str:
    """Per-head accuracy on held-out samples and the tree built from it."""
    cal = provenance.get("medusa")
    if not cal or "head_accuracy" not in cal:
        return ""
    rows = "\n".join(
        f"| {k} | +{k + 2} | {acc[0]:.3f} | {sum(acc[:5]):.3f} |" for k, acc in enumerate(cal["head_accuracy"])
    )
    return f"""

## Medusa heads (held-out accuracy, {cal["holdout_samples"]} samples)

| head | predicts token | top-1 | top-5 |
|---|---|---|---|
{rows}

Token tree (`medusa_tree.json`): {cal["tree_nodes"]} nodes, depth {cal["tree_depth"]}, expected τ \
{cal["expected_tau"]:.2f} if the heads erred independently."""


def _shape(ev: dict) -> str:
    settings = ev.get("settings", {})
    if settings.get("tree"):
        return f"tree ({ev.get('draft_tokens_per_step', 0):.0f} nodes)"
    return str(settings.get("num_speculative_tokens", "?"))


def dflash_usage(target: str, gamma: int, provenance: dict) -> str:
    settings = provenance.get("drafter_config") or {}
    block = settings.get("block_size")
    gamma = block - 1 if isinstance(block, int) else gamma
    return f"""## Use it

A DFlash drafter proposes a whole block in one forward: after the target's newest token it reads
{gamma} mask slots (mask token id {settings.get("mask_token_id")}), attending to the target's hidden
states at layers {settings.get("layer_ids")} (vLLM's `target_layer_ids` in `config.json` are those
minus one). The target's embeddings and lm_head are shared, so none ships here. vLLM:

```python
from vllm import LLM
llm = LLM(model="{target}",
          speculative_config={{"method": "dflash", "model": "THIS_DIRECTORY", "num_speculative_tokens": {gamma}}})
```

`num_speculative_tokens` = block_size − 1 = {gamma} is what it was trained for (fewer also work).
drafthub's engine (chains, lossless): `python -m eval drafter_dir=THIS_DIRECTORY prompts=PROMPTS.jsonl out_dir=OUT`."""
