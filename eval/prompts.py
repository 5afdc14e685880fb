"""Eval prompts, one reader for `python -m eval` and the pipeline's eval stage: conversations in the
messages format, without their trailing assistant turns (the reference answers), templated by the
target's tokenizer with the assistant generation prompt — what a server receives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Optional

from eval.errors import EvalError


def read_conversations(path: str | Path) -> list[list[dict]]:
    """The `messages` of every line of a JSONL file."""
    path = Path(path)
    if not path.is_file():
        raise EvalError(f"prompts file {path} does not exist; pass prompts=<file.jsonl>")
    out = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(list(json.loads(line)["messages"]))
            except (json.JSONDecodeError, KeyError, TypeError):
                raise EvalError(
                    f"{path}:{lineno}: expected a JSON object with a 'messages' list; fix or remove that line"
                ) from None
    return out


def prompt_messages(messages: list[dict]) -> list[dict]:
    """The conversation without its trailing assistant turns: the turn the target answers next."""
    end = len(messages)
    while end and messages[end - 1].get("role") == "assistant":
        end -= 1
    return messages[:end]


def prompt_ids(
    conversations: Iterable[list[dict]], tokenizer, *, limit: int, max_len: Optional[int] = None
) -> list[list[int]]:
    """Token ids of up to `limit` prompts; prompts longer than max_len tokens are skipped."""
    out = []
    for messages in conversations:
        chat = tokenizer.apply_chat_template(
            prompt_messages(messages), add_generation_prompt=True, tokenize=True, return_dict=True
        )
        ids = list(chat["input_ids"])
        if max_len is None or len(ids) <= max_len:
            out.append(ids)
        if len(out) >= limit:
            break
    if not out:
        raise EvalError("no eval prompts (none given, or every one longer than the target's context allows)")
    return out


def read_prompt_ids(path: str | Path, tokenizer, limit: int) -> list[list[int]]:
    """prompt_ids of a JSONL file's conversations."""
    return prompt_ids(read_conversations(path), tokenizer, limit=limit)
