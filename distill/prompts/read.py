"""Prompt sets: the one reader of distill, the eval stage and `python -m eval`.

Sources: `toyworld`; a JSONL file (also gzipped, .jsonl.gz: HumanEval's layout); a .json list; a .parquet file; a
file without an extension (sniffed); a directory saved with `datasets`' save_to_disk (Dataset or DatasetDict); a
dataset directory or HF hub name (`datasets.load_dataset`).

Rows (distill/prompts/rows.py), by the first field they have: chat `messages`; ShareGPT `conversations` ({from,
value}); `turns`, a list of user turns (MT-Bench, Spec-Bench, DeepSpec), which the target answers one after another,
each prompt holding its own answers to the turns before (an owed answer is an assistant message with content None:
distill/prompts/chat.py pending_turn); `prompt`, one user turn (HumanEval's code stub), answered by the row's
`completion` where it has one (TRL's prompt-completion rows: the dataset's own answer, kept with
data.regenerate=false); `text`, raw text the target continues untemplated (a base model's completion prompt;
distill/prompts/chat.py TEXT), its `completion` likewise. A completion prompt set (COMPLETION_SETS:
`stdlib_continue`, `humaneval_completion`) reads its `prompt` as such text. `<prompts setting>_column`
(data.prompts_column, eval_prompts_column, prompts_column) names the column instead, read by what it holds: a
string, a list of strings (turns), messages or ShareGPT turns. A row's `category` (Spec-Bench, MT-Bench) comes
along, for eval's figures per category. OpenAI-style content parts ([{"type": "text", "text": ...}]) are joined on
the way in.

Bad input is one DistillError naming the file, its line or row, and the setting to fix (`prompts_key` /
`split_key`: each caller names its own settings).
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator, Optional

from distill.errors import DistillError
from distill.prompts.rows import CATEGORY, COMPLETION, FIELDS, NO_FIELD, Keys, Row, read_row
from distill.prompts.sets import COMPLETION_SETS, PROMPT_SETS, PromptSet, is_prompt_set

_SUFFIXES = ("", ".jsonl", ".json", ".parquet", ".jsonl.gz", ".json.gz")
_SAVED = ("dataset_dict.json", "state.json")  # what save_to_disk leaves in a DatasetDict / Dataset directory
_ICONV = "re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)"
_WHITESPACE = re.compile(r"[ \t\n\r]*")


def read_prompts(
    source: str,
    split: Optional[str],
    toyworld_prompts: Path | None = None,
    *,
    column: Optional[str] = None,
    prompts_key: str = "data.prompts",
    split_key: str = "data.split",
) -> PromptSet:
    """Read the conversations of `source` and their categories.

    Args:
        source: a benchmark by name (PROMPT_SETS: `mt_bench`, `humaneval`, or several joined by `+`),
            `toyworld`, a local file (.jsonl, .jsonl.gz, .json, .parquet, or no extension), a local dataset
            directory (save_to_disk, or data files), or an HF hub dataset name.
        split: the split to read from a dataset with several (a file has none); None = its only split.
        toyworld_prompts: the toy world's prompt file, used when source is `toyworld`.
        column: the column (a JSON row's field) holding the prompts, read by what it holds; None = auto-detect
            messages, conversations, turns, prompt, in that order.
        prompts_key, split_key: the settings the caller read source and split from, named in messages; the
            column's setting is named `<prompts_key>_column`.
    """
    keys = Keys(prompts_key, split_key, column)
    if is_prompt_set(source):
        rows = [row for name in source.split("+") for row in _prompt_set(name, keys)]
    elif source == "toyworld":
        if toyworld_prompts is None:
            raise DistillError(
                f"{keys.prompts}=toyworld reads the toy world's prompts, so it needs a toy world target "
                "(target.name_or_path=toyworld:<size>); give a prompts file or dataset instead"
            )
        rows = _read_jsonl(Path(toyworld_prompts), keys)
    else:
        rows = _read_source(source, split, keys)
    if not rows:
        raise DistillError(
            f'{source} holds no conversations; give it rows of the form {{"messages": [...]}} (check {keys.prompts})'
        )
    return PromptSet([messages for messages, _ in rows], [category for _, category in rows])


def load_conversations(
    source: str,
    split: Optional[str],
    toyworld_prompts: Path | None = None,
    *,
    column: Optional[str] = None,
    prompts_key: str = "data.prompts",
    split_key: str = "data.split",
) -> list[list[dict]]:
    """The conversations of read_prompts (same arguments), without their categories."""
    return read_prompts(
        source, split, toyworld_prompts, column=column, prompts_key=prompts_key, split_key=split_key
    ).conversations


def _prompt_set(name: str, keys: Keys) -> list[Row]:
    """A benchmark's rows, each category prefixed with the benchmark's name (`mt_bench/coding`; `humaneval`), so a
    report groups them by workload."""
    rows = _read_file(PROMPT_SETS[name](), keys._replace(completion=name in COMPLETION_SETS))
    return [(messages, f"{name}/{category}" if category else name) for messages, category in rows]


def _read_source(source: str, split: Optional[str], keys: Keys) -> list[Row]:
    path = Path(source).expanduser()
    suffix = _suffix(path)
    if path.is_dir():
        return _read_directory(path, split, keys)
    if path.is_file():
        if suffix not in _SUFFIXES:
            raise DistillError(
                f"unsupported prompts file type {suffix!r} ({path}); use .jsonl, .jsonl.gz, .json or .parquet"
            )
        return _read_file(path, keys)
    if suffix in _SUFFIXES[1:] or _is_path(source):
        raise DistillError(f"prompts file {path} does not exist; check {keys.prompts}")
    return _read_dataset(source, split, keys, local=False)  # a hub name, e.g. HuggingFaceH4/ultrachat_200k


def _suffix(path: Path) -> str:
    """The file type: `.jsonl`, or `.jsonl.gz` for a gzipped one."""
    suffix = path.suffix.lower()
    return "".join(path.suffixes[-2:]).lower() if suffix == ".gz" else suffix


def _is_path(source: str) -> bool:
    """A local path, never a hub id (`name` or `org/name`): a hub lookup would only add a confusing message."""
    return source.startswith(("/", ".", "~")) or "\\" in source or source.count("/") > 1


# ---- files -------------------------------------------------------------------------------------------------------


def _open(path: Path) -> BinaryIO:
    return gzip.open(path, "rb") if path.suffix.lower() == ".gz" else path.open("rb")


def _read_file(path: Path, keys: Keys) -> list[Row]:
    """A .jsonl(.gz), .json(.gz) or .parquet file; one without an extension is sniffed (parquet magic, JSONL, JSON)."""
    suffix = _suffix(path)
    with path.open("rb") as f:
        head = f.read(4)
    if suffix == ".parquet" or (not suffix and head == b"PAR1"):
        return _read_parquet(path, keys)
    try:
        if suffix.startswith(".jsonl") or _first_line_is_object(path):
            return _read_jsonl(path, keys)
        return _read_json(path, keys)
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise DistillError(f"{path} is not a readable gzip file ({_cause(e)}); check {keys.prompts}") from None


def _first_line_is_object(path: Path) -> bool:
    """JSONL (one object per line) rather than one JSON document, judged by the first non-blank line."""
    with _open(path) as f:
        for raw in f:
            line = raw.removeprefix(b"\xef\xbb\xbf").strip()
            if line:
                return line.startswith(b"{") and line.endswith(b"}")
    return False


def _not_utf8(where: str, byte: int, column: int) -> DistillError:
    return DistillError(f"{where} is not UTF-8 (byte 0x{byte:02x} at column {column}); {_ICONV}")


def _read_jsonl(path: Path, keys: Keys) -> list[Row]:
    if not path.is_file():
        raise DistillError(f"prompts file {path} does not exist; check {keys.prompts}")
    out = []
    with _open(path) as f:  # bytes, so that a non-UTF-8 line is named rather than a traceback
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
            out.append(read_row(row, f"{path}:{lineno}", keys))
    if not out:
        raise DistillError(f'{path} holds no conversations; add lines of the form {{"messages": [...]}}')
    return out


def _read_json(path: Path, keys: Keys) -> list[Row]:
    """A JSON list of rows (ShareGPT's layout), each named by the line it starts on."""
    with _open(path) as f:
        raw = f.read().removeprefix(b"\xef\xbb\xbf")
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
        return [read_row(row, f"{path}:{line}", keys) for line, row in _json_list(text, path)]
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


def _read_parquet(path: Path, keys: Keys) -> list[Row]:
    """Only the prompt column (and `category`) is read: UltraChat-like files carry other, larger columns."""
    import pyarrow
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
        names = table.schema_arrow.names
        columns = _columns_of(names, str(path), keys)
        rows = (row for batch in table.iter_batches(columns=columns) for row in batch.to_pylist())
        return _read_rows(rows, f"{path} row", keys)
    except (pyarrow.ArrowException, OSError) as e:
        raise DistillError(f"{path} is not a readable parquet file ({_cause(e)}); check {keys.prompts}") from None


# ---- datasets ----------------------------------------------------------------------------------------------------


def _read_directory(path: Path, split: Optional[str], keys: Keys) -> list[Row]:
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
    return _read_table(saved, str(path), keys)


def _read_dataset(name: str, split: Optional[str], keys: Keys, local: bool) -> list[Row]:
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
    return _read_table(rows, name, keys)


def _cause(e: Exception) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"


def _split_of(names: list[str], split: Optional[str], where: str, keys: Keys) -> str:
    if split is None and len(names) == 1:
        return names[0]
    if split is None:
        raise DistillError(f"{where} has splits {sorted(names)}; set {keys.split} to one of them")
    if split not in names:
        raise DistillError(f"{where} has no split {split!r}, only {sorted(names)}; set {keys.split} to one of them")
    return split


def _read_table(rows, where: str, keys: Keys) -> list[Row]:
    """Rows of a `datasets.Dataset`, reading only the prompt column (and `category`)."""
    return _read_rows(rows.select_columns(_columns_of(rows.column_names, where, keys)), f"{where} row", keys)


def _columns_of(columns: list[str], where: str, keys: Keys) -> list[str]:
    """The columns to read of a table: the prompts' (the one named, else the first of FIELDS), and `category`."""
    if keys.column is not None and keys.column not in columns:
        raise DistillError(
            f"{where}: no column {keys.column!r}, only {sorted(columns)}; set {keys.column_key} to the one holding "
            "the prompts"
        )
    field = keys.column or next((f for f in FIELDS if f in columns), None)
    if field is None:
        raise DistillError(
            f"{where}: {NO_FIELD} column; found {sorted(columns)}; set {keys.column_key} to the one holding the prompts"
        )
    answer = [COMPLETION] if field in ("prompt", "text") and keys.column is None and COMPLETION in columns else []
    return [field, *answer, *([CATEGORY] if CATEGORY in columns and field != CATEGORY else [])]


def _read_rows(rows: Iterable, where: str, keys: Keys) -> list[Row]:
    return [read_row(row, f"{where} {i}", keys) for i, row in enumerate(rows)]
