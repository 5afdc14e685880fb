"""transformers as a consumer: `generate` with an assistant model (draft LMs, layer skipping, PARD run one
token per forward) or with prompt lookup. drafthub's own engine is built on transformers models and is the
check of these snippets' drafters, so no separate served check starts here."""

from __future__ import annotations

from heads.formats import Consumer

ENGINE = "transformers"
NOT_STARTED = "transformers' generate is not a server; drafthub's own engine (python -m eval) measures it"


def _assistant_usage(target: str, gamma: int, provenance: dict) -> str:
    return f"""transformers (`assistant_model`, one draft token per forward):

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
target = AutoModelForCausalLM.from_pretrained("{target}")
draft = AutoModelForCausalLM.from_pretrained("THIS_DIRECTORY")
tok = AutoTokenizer.from_pretrained("{target}")
ids = tok.apply_chat_template([{{"role": "user", "content": "..."}}], add_generation_prompt=True, return_tensors="pt")
out = target.generate(ids, assistant_model=draft, num_assistant_tokens={gamma},
                      num_assistant_tokens_schedule="constant", max_new_tokens=128)
```"""


def _prompt_lookup_usage(target: str, gamma: int, provenance: dict) -> str:
    longest = (provenance.get("drafter_config") or {}).get("prompt_lookup_max")
    return f"transformers: `target.generate(ids, prompt_lookup_num_tokens={gamma}, max_matching_ngram_size={longest})`."


ASSISTANT = Consumer(ENGINE, usage=_assistant_usage, missing=lambda: NOT_STARTED)
PROMPT_LOOKUP = Consumer(ENGINE, usage=_prompt_lookup_usage, missing=lambda: NOT_STARTED)
