"""Model cards and provenance files that travel with every exported drafter."""

from __future__ import annotations

import json


def render_model_card(provenance: dict) -> str:
    """README.md with HF metadata (YAML front matter) and the measured acceptance."""
    ev = provenance.get("eval") or {}
    target = provenance["target"]["name_or_path"]
    kind = provenance["kind"]
    per_pos = ", ".join(f"{a:.2f}" for a in ev.get("per_position_acceptance", []))
    return f"""---
library_name: transformers
pipeline_tag: text-generation
base_model: {json.dumps(target)}
tags:
- speculative-decoding
- drafthub
- {kind.replace('_', '-')}
---

# {provenance['model_name']}

A `{kind}` drafter for speculative decoding with target `{target}`, trained by
drafthub on the target's own answers (recipe `{provenance['recipe']['recipe_name']}`).

## Measured acceptance (drafthub eval, {ev.get('settings', {}).get('num_prompts', '?')} held-out prompts)

| τ (mean accepted length) | α | speedup vs autoregressive | γ | lossless |
|---|---|---|---|---|
| {ev.get('tau', float('nan')):.3f} | {ev.get('alpha', float('nan')):.3f} | {ev.get('speedup', float('nan')):.2f}× | {ev.get('settings', {}).get('num_speculative_tokens', '?')} | {ev.get('lossless')} |

Per-position acceptance: {per_pos or 'n/a'}. Recommended `num_speculative_tokens` (fastest in
the γ sweep): {ev.get('recommended_num_speculative_tokens', 'n/a')}.

## Use it

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
target = AutoModelForCausalLM.from_pretrained("{target}")
draft = AutoModelForCausalLM.from_pretrained("THIS_DIRECTORY")
tok = AutoTokenizer.from_pretrained("{target}")
ids = tok.apply_chat_template([{{"role": "user", "content": "..."}}], add_generation_prompt=True, return_tensors="pt")
out = target.generate(ids, assistant_model=draft, max_new_tokens=128)
```

vLLM: `speculative_config={{"method": "draft_model", "model": "THIS_DIRECTORY", "num_speculative_tokens": {ev.get('recommended_num_speculative_tokens', 4)}}}`.

Provenance (target revision, tokenizer hash, data manifest, resolved recipe) is in `drafthub.json`.
"""
