"""Prompt sets in the chat `messages` format: the one reader of distill, the eval stage and `python -m eval`.

Sources: `toyworld`; a JSONL file; a .json list; a .parquet file; a file without an extension (sniffed); a
directory saved with `datasets`' save_to_disk (Dataset or DatasetDict); a dataset directory or HF hub name
(`datasets.load_dataset`). ShareGPT `conversations` ({from, value}) and OpenAI-style content parts
([{"type": "text", "text": ...}]) are converted on the way in. Bad input is one DistillError naming the file,
its line or row, and the setting to fix (`prompts_key` / `split_key`: each caller names its own settings).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple, Optional

from distill.chat import ROLES
from distill.errors import DistillError

_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}
_FIELDS = ("messages", "conversations")  # the conversation field of a row, in order of preference
_SAVED = ("dataset_dict.json", "state.json")  # what save_to_disk leaves in a DatasetDict / Dataset directory
_ICONV = "re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)"
_WHITESPACE = re.compile(r"[ \t\n\r]*")


class _Keys(NamedTuple):
    prompts: str
    split: str


def load_conversations(
    source: str,
    split: Optional[str],
    toyworld_prompts: Path | None = None,
    *,
    prompts_key: str = "data.prompts",
    split_key: str = "data.split",
) -> list[list[dict]]:
    """Read conversations from `source`; each is a list of {role, content} dicts.

    Args:
        source: `toyworld`, a local file (.jsonl, .json, .parquet, or no extension), a local dataset
            directory (save_to_disk, or data files), or an HF hub dataset name.
        split: the split to read from a dataset with several (a file has none); None = its only split.
        toyworld_prompts: the toy world's prompt file, used when source is `toyworld`.
        prompts_key, split_key: the settings the caller read source and split from, named in messages.
    """
    keys = _Keys(prompts_key, split_key)
    if source == "toyworld":
        if toyworld_prompts is None:
            raise DistillError(
                f"{keys.prompts}=toyworld reads the toy world's prompts, so it needs a toy world target "
                "(target.name_or_path=toyworld:<size>); give a prompts file or dataset instead"
            )
        out = _read_jsonl(Path(toyworld_prompts), keys)
    else:
        out = _read_source(source, split, keys)
    if not out:
        raise DistillError(
            f'{source} holds no conversations; give it rows of the form {{"messages": [...]}} (check {keys.prompts})'
        )
    return out


def _read_source(source: str, split: Optional[str], keys: _Keys) -> list[list[dict]]:
    path = Path(source).expanduser()
    suffix = path.suffix.lower()
    if path.is_dir():
        return _read_directory(path, split, keys)
    if path.is_file():
        if suffix not in {"", ".jsonl", ".json", ".parquet"}:
            raise DistillError(f"unsupported prompts file type {path.suffix!r} ({path}); use .jsonl, .json or .parquet")
        return _read_file(path, keys)
    if suffix in {".jsonl", ".json", ".parquet"} or _is_path(source):
        raise DistillError(f"prompts file {path} does not exist; check {keys.prompts}")
    return _read_dataset(source, split, keys, local=False)  # a hub name, e.g. HuggingFaceH4/ultrachat_200k


def _is_path(source: str) -> bool:
    """A local path, never a hub id (`name` or `org/name`): a hub lookup would only add a confusing message."""
    return source.startswith(("/", ".", "~")) or "\\" in source or source.count("/") > 1


# ---- files -------------------------------------------------------------------------------------------------------


def _read_file(path: Path, keys: _Keys) -> list[list[dict]]:
    """A .jsonl, .json or .parquet file; one without an extension is sniffed (parquet magic, JSONL, JSON)."""
    suffix = path.suffix.lower()
    with path.open("rb") as f:
        head = f.read(4)
    if suffix == ".parquet" or (not suffix and head == b"PAR1"):
        return _read_parquet(path, keys)
    if suffix == ".jsonl" or _first_line_is_object(path):
        return _read_jsonl(path, keys)
    return _read_json(path)


def _first_line_is_object(path: Path) -> bool:
    """JSONL (one object per line) rather than one JSON document, judged by the first non-blank line."""
    with path.open("rb") as f:
        for raw in f:
            line = raw.removeprefix(b"\xef\xbb\xbf").strip()
            if line:
                return line.startswith(b"{") and line.endswith(b"}")
    return False


def _not_utf8(where: str, byte: int, column: int) -> DistillError:
    return DistillError(f"{where} is not UTF-8 (byte 0x{byte:02x} at column {column}); {_ICONV}")


def _read_jsonl(path: Path, keys: _Keys) -> list[list[dict]]:
    if not path.is_file():
        raise DistillError(f"prompts file {path} does not exist; check {keys.prompts}")
    out = []
    with path.open("rb") as f:  # bytes, so that a non-UTF-8 line is named rather than a traceback
        for lineno, raw in enumerate(f, 1):
            if lineno == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")  # a BOM (utf-8-sig), as some Windows tools write
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise _not_utf8(f"{path}:{lineno}", raw[e.start], e.start + 1) from None
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


def _read_json(path: Path) -> list[list[dict]]:
    """A JSON list of rows (ShareGPT's layout), each named by the line it starts on."""
    raw = path.read_bytes().removeprefix(b"\xef\xbb\xbf")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line, start = raw.count(b"\n", 0, e.start) + 1, raw.rfind(b"\n", 0, e.start) + 1
        raise _not_utf8(f"{path}:{line}", raw[e.start], e.start - start + 1) from None
    if not text.strip() or re.fullmatch(r"\s*\[\s*\]\s*", text):
        raise DistillError(
            f'{path} holds no conversations; give it a JSON list of {{"messages": [...]}} objects '
            "(or one object per line, JSONL)"
        )
    try:
        return [_conversation(row, f"{path}:{line}") for line, row in _json_list(text, path)]
    except json.JSONDecodeError as e:
        raise DistillError(f"{path}:{e.lineno}: malformed JSON ({e.msg} at column {e.colno}); fix the file") from None


def _json_list(text: str, path: Path) -> Iterator[tuple[int, object]]:
    """The items of a JSON list with the line each starts on, decoded one at a time."""
    decoder = json.JSONDecoder()
    pos = _WHITESPACE.match(text).end()
    if not text.startswith("[", pos):
        found = decoder.raw_decode(text, pos)[0]
        raise DistillError(
            f'{path}: expected a JSON list of {{"messages": [...]}} objects (or JSONL, one per line), '
            f"got {'an object' if isinstance(found, dict) else type(found).__name__}"
        )
    pos, line, counted = _WHITESPACE.match(text, pos + 1).end(), 1, 0
    if text.startswith("]", pos):
        return
    while True:
        item, end = decoder.raw_decode(text, pos)
        line, counted = line + text.count("\n", counted, pos), pos
        yield line, item
        pos = _WHITESPACE.match(text, end).end()
        if text.startswith(",", pos):
            pos = _WHITESPACE.match(text, pos + 1).end()
        elif text.startswith("]", pos) and not text[pos + 1 :].strip():
            return
        else:
            raise json.JSONDecodeError("Expecting ',' delimiter or the list's end", text, pos)


def _read_parquet(path: Path, keys: _Keys) -> list[list[dict]]:
    """Only the conversation column is read: UltraChat-like files carry other, larger columns."""
    import pyarrow
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
        field = _field_of(table.schema_arrow.names, str(path))
        values = (v for batch in table.iter_batches(columns=[field]) for v in batch.column(0).to_pylist())
        return _read_rows(({field: v} for v in values), f"{path} row")
    except (pyarrow.ArrowException, OSError) as e:
        raise DistillError(f"{path} is not a readable parquet file ({_cause(e)}); check {keys.prompts}") from None


# ---- datasets ----------------------------------------------------------------------------------------------------


def _read_directory(path: Path, split: Optional[str], keys: _Keys) -> list[list[dict]]:
    """save_to_disk output loads with load_from_disk (load_dataset refuses it); other directories as data files."""
    if not any((path / name).is_file() for name in _SAVED):
        return _read_dataset(str(path), split, keys, local=True)
    import datasets

    try:
        saved = datasets.load_from_disk(str(path))
    except (OSError, ValueError) as e:
        raise DistillError(f"could not read the saved dataset {path} ({_cause(e)}); check {keys.prompts}") from None
    if isinstance(saved, datasets.DatasetDict):
        saved = saved[_split_of(list(saved), split, str(path), keys)]
    return _read_table(saved, str(path))


def _read_dataset(name: str, split: Optional[str], keys: _Keys, local: bool) -> list[list[dict]]:
    """A directory of data files or a hub name, through `datasets.load_dataset`'s builder."""
    import datasets

    try:
        builder = datasets.load_dataset_builder(name)
    except (OSError, ValueError) as e:  # DatasetNotFoundError and ConnectionError are OSErrors
        cause = _cause(e)
        if local:
            raise DistillError(
                f"{name} is a directory but not a dataset ({cause}); give a directory saved with save_to_disk, "
                f"one of data files (data/train-*.parquet), or a file; check {keys.prompts}"
            ) from None
        raise DistillError(
            f"prompts {name!r} is neither a local file or directory nor a dataset that loads from the Hub "
            f"({cause}); check {keys.prompts}"
        ) from None
    names = list(builder.config.data_files or {}) or list(builder.info.splits or {})
    if names:
        split = _split_of(names, split, name, keys)
    try:
        builder.download_and_prepare()
        rows = builder.as_dataset(split=split)
    except (OSError, ValueError) as e:
        raise DistillError(f"could not load prompts {name!r} ({_cause(e)}); check {keys.prompts}") from None
    if isinstance(rows, datasets.DatasetDict):  # split None and no split names known beforehand
        rows = rows[_split_of(list(rows), None, name, keys)]
    return _read_table(rows, name)


def _cause(e: Exception) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"


def _split_of(names: list[str], split: Optional[str], where: str, keys: _Keys) -> str:
    if split is None and len(names) == 1:
        return names[0]
    if split is None:
        raise DistillError(f"{where} has splits {sorted(names)}; set {keys.split} to one of them")
    if split not in names:
        raise DistillError(f"{where} has no split {split!r}, only {sorted(names)}; set {keys.split} to one of them")
    return split


def _read_table(rows, where: str) -> list[list[dict]]:
    """Rows of a `datasets.Dataset`, reading only the conversation column."""
    return _read_rows(rows.select_columns([_field_of(rows.column_names, where)]), f"{where} row")


def _field_of(columns: list[str], where: str) -> str:
    for field in _FIELDS:
        if field in columns:
            return field
    raise DistillError(f"{where}: no 'messages' (or ShareGPT 'conversations') column; found {sorted(columns)}")


def _read_rows(rows: Iterable, where: str) -> list[list[dict]]:
    return [_conversation(row, f"{where} {i}") for i, row in enumerate(rows)]


# ---- one row -----------------------------------------------------------------------------------------------------


def _conversation(row, where: str) -> list[dict]:
    """Validate one row and return its messages in {role, content} form."""
    if not isinstance(row, dict):
        raise DistillError(f"{where}: expected a JSON object with a 'messages' list, got {type(row).__name__}")
    if "messages" in row:
        messages = row["messages"]
        if not isinstance(messages, list) or not messages:
            raise DistillError(f"{where}: 'messages' must be a non-empty list of {{role, content}} objects")
    elif "conversations" in row:  # ShareGPT
        turns = row["conversations"]
        if not isinstance(turns, list):
            raise DistillError(f"{where}: 'conversations' must be a list of ShareGPT {{from, value}} turns")
        # real ShareGPT dumps hold rows with no turns: an empty conversation, dropped and counted as one with no
        # user turn (distill), or named as such (eval)
        messages = [_sharegpt_turn(t, where) for t in turns]
    else:
        raise DistillError(f"{where}: no 'messages' (or ShareGPT 'conversations') field; found {sorted(row)}")
    out = []
    for number, m in enumerate(messages, 1):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise DistillError(
                f"{where}: each message needs a role in {list(ROLES)} and a string content; got {m!r:.80}"
            )
        out.append({"role": m["role"], "content": _text(m.get("content"), f"{where}: message {number}")})
    return out


def _sharegpt_turn(turn, where: str) -> dict:
    if not isinstance(turn, dict) or turn.get("from") not in _SHAREGPT_ROLES or not isinstance(turn.get("value"), str):
        raise DistillError(
            f"{where}: each ShareGPT turn needs 'from' in {list(_SHAREGPT_ROLES)} and a string 'value'; "
            f"got {turn!r:.80}"
        )
    return {"role": _SHAREGPT_ROLES[turn["from"]], "content": turn["value"]}


def _text(content, where: str) -> str:
    """A string content, or OpenAI-style text parts joined by newlines (as vLLM's chat server joins them)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise DistillError(f"{where} needs a string content (or a list of text parts); got {type(content).__name__}")
    texts = []
    for part in content:
        part_type = part.get("type") if isinstance(part, dict) else type(part).__name__
        if part_type == "text" and not isinstance(part.get("text"), str):
            raise DistillError(f"{where} has a text part without a string 'text'; got {part!r:.80}")
        if part_type != "text":
            raise DistillError(
                f"{where} has a content part of type {part_type!r}; only text parts "
                '({"type": "text", "text": "..."}) are supported: drop the others or the conversation'
            )
        texts.append(part["text"])
    return "\n".join(texts)
