"""Prompt sets in the chat `messages` format: a JSONL/JSON/parquet file, an HF dataset, or the
toy world's. ShareGPT-style `conversations` ({from, value}) are converted on the way in."""

from __future__ import annotations

import json
from pathlib import Path

from distill.chat import ROLES
from distill.errors import DistillError

_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}


def load_conversations(source: str, split: str, toyworld_prompts: Path | None = None) -> list[list[dict]]:
    """Read conversations from `source`; each is a list of {role, content} dicts.

    Args:
        source: `toyworld`, a local .jsonl/.json/.parquet file, a local dataset directory, or
            an HF hub dataset name (loaded with `datasets.load_dataset`).
        split: the split to read from a dataset (ignored for single files).
        toyworld_prompts: the toy world's prompt file, used when source is `toyworld`.
    """
    if source == "toyworld":
        if toyworld_prompts is None:
            raise DistillError("data.prompts=toyworld needs a toy world target (target.name_or_path=toyworld:<size>)")
        return _read_jsonl(toyworld_prompts)
    path = Path(source).expanduser()
    if path.suffix == ".jsonl" or (path.suffix == ".json" and path.is_file() and _is_jsonl(path)):
        return _read_jsonl(path)
    if path.suffix in {".json", ".parquet"}:
        if not path.exists():
            raise DistillError(f"prompts file {path} does not exist; check data.prompts")
        return _read_rows(_load_dataset(path.suffix.lstrip("."), data_files=str(path), split="train"), str(path))
    if path.suffix:
        raise DistillError(f"unsupported prompts file type {path.suffix!r}; use .jsonl, .json or .parquet")
    # A local dataset directory or a hub name: the loading code real users rely on.
    return _read_rows(_load_dataset(str(path) if path.exists() else source, split=split), source)


def _load_dataset(*args, **kwargs):
    import datasets

    try:
        return datasets.load_dataset(*args, **kwargs)
    except (FileNotFoundError, ValueError, datasets.exceptions.DatasetNotFoundError) as e:
        raise DistillError(
            f"could not load prompts {args[0]!r} ({type(e).__name__}: {str(e).splitlines()[0]}); "
            "check data.prompts and data.split"
        ) from None


def _is_jsonl(path: Path) -> bool:
    with path.open() as f:
        first = f.readline().strip()
    return first.startswith("{") and first.endswith("}")


def _read_jsonl(path: Path) -> list[list[dict]]:
    if not path.exists():
        raise DistillError(f"prompts file {path} does not exist; check data.prompts")
    out = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DistillError(
                    f"{path}:{lineno}: malformed JSON ({e.msg} at column {e.colno}); fix or remove that line"
                ) from None
            out.append(_conversation(row, f"{path}:{lineno}"))
    if not out:
        raise DistillError(f'{path} holds no conversations; add lines of the form {{"messages": [...]}}')
    return out


def _read_rows(rows, where: str) -> list[list[dict]]:
    return [_conversation(row, f"{where} row {i}") for i, row in enumerate(rows)]


def _conversation(row, where: str) -> list[dict]:
    """Validate one row and return its messages in {role, content} form."""
    if not isinstance(row, dict):
        raise DistillError(f"{where}: expected a JSON object with a 'messages' list, got {type(row).__name__}")
    if "messages" in row:
        messages = row["messages"]
    elif "conversations" in row:  # ShareGPT
        messages = [
            {"role": _SHAREGPT_ROLES.get(m.get("from"), m.get("from")), "content": m.get("value")}
            for m in row["conversations"] or []
        ]
    else:
        raise DistillError(f"{where}: no 'messages' (or ShareGPT 'conversations') field; found {sorted(row)}")
    if not isinstance(messages, list) or not messages:
        raise DistillError(f"{where}: 'messages' must be a non-empty list of {{role, content}} objects")
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise DistillError(
                f"{where}: each message needs a role in {list(ROLES)} and a string content; got {m!r:.80}"
            )
    return [{"role": m["role"], "content": m["content"]} for m in messages]
