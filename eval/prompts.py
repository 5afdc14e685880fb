"""Eval prompts for `python -m eval`: a JSONL of {"messages": [...]} conversations, templated by
the target's tokenizer with the last assistant turn (the reference answer) removed."""

from __future__ import annotations

import json
from pathlib import Path

from eval.errors import EvalError


def read_prompt_ids(path: str | Path, tokenizer, limit: int) -> list[list[int]]:
    path = Path(path)
    if not path.is_file():
        raise EvalError(f"prompts file {path} does not exist; pass prompts=<file.jsonl>")
    out = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                messages = json.loads(line)["messages"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise EvalError(f"{path}:{lineno}: expected a JSON object with a 'messages' list; fix or remove that line") from None
            while messages and messages[-1].get("role") == "assistant":
                messages = messages[:-1]
            out.append(list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]))
            if len(out) >= limit:
                break
    if not out:
        raise EvalError(f"{path} holds no prompts")
    return out
