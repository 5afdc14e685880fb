"""Code requests from the running Python's standard library (`data.prompts=stdlib_code`, or a `data.mix` entry).

Each request is one top-level stdlib function cut to its signature and docstring, a stub the target completes, as
HumanEval presents its problems. The target writes code on them without any dataset download. The functions are
HumanEval's kind of task, never its text, so the eval prompts stay held out (the overlap check still runs).

`stdlib_code_answers` is the same requests in the same order, each with the stdlib's own function as its
`completion` (a prompt-completion row): with `data.regenerate=false` a drafter learns the stdlib's text instead of
the target's answers to the same stubs, which is what scripts/bench_answer_source.py weighs.

Each file is built once per Python version into $DRAFTHUB_CACHE/prompt_sets/ (atomically, in a fixed shuffled
order, so the first N of any cap span many modules).
"""

from __future__ import annotations

import ast
import hashlib
import json
import random
import sys
import sysconfig
import textwrap
from pathlib import Path
from typing import Iterator

from heads.cache import cache_root
from heads.formats.staging import atomic_write_text

SKIPPED = ("test", "tests", "idlelib", "tkinter", "turtledemo", "lib2to3", "ensurepip", "site-packages", "pydoc_data")
MIN_DOC, MAX_DOC, MAX_STUB_LINES = 40, 600, 24  # docstrings that say what the function does, in a stub that fits


def stdlib_code_file() -> Path:
    """The requests file for this Python (built on first use): rows of {"prompt": stub, "category": module}."""
    return _built("stdlib_code", keep=("prompt", "category"))


def stdlib_code_answers_file() -> Path:
    """The same requests, in the same order, each with the stdlib's own function as its `completion`."""
    return _built("stdlib_code_answers", keep=("prompt", "completion", "category"))


def _built(name: str, keep: tuple[str, ...]) -> Path:
    root, path = stdlib_root(), prompt_set_path(name)
    if not path.is_file():
        rows = list(_unique(stub for module in stdlib_modules(root) for stub in function_stubs(module, root)))
        random.Random(0).shuffle(rows)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, "".join(json.dumps({k: row[k] for k in keep}) + "\n" for row in rows))
    return path


def stdlib_root() -> Path:
    """The running Python's standard library directory."""
    return Path(sysconfig.get_paths()["stdlib"])


def prompt_set_path(name: str) -> Path:
    """Where a prompt set built from this Python's stdlib is cached (one file per Python version)."""
    return cache_root() / "prompt_sets" / f"{name}-py{sys.version_info.major}.{sys.version_info.minor}.jsonl"


def stdlib_modules(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*.py")):
        if not set(path.relative_to(root).parts[:-1]) & set(SKIPPED) and not path.name.startswith("test_"):
            yield path


def function_stubs(path: Path, root: Path) -> Iterator[dict]:
    """Each public top-level function's signature and docstring, as a stub to complete, and the whole function (the
    stdlib's own answer to the stub)."""
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return
    lines = source.splitlines()
    module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
    for node in tree.body:
        doc = ast.get_docstring(node) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
        if doc is None or node.name.startswith("_") or not MIN_DOC <= len(doc) <= MAX_DOC:
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        stub = lines[first - 1 : node.body[0].end_lineno]
        if len(stub) <= MAX_STUB_LINES:
            whole = textwrap.dedent("\n".join(lines[first - 1 : node.end_lineno])) + "\n"
            yield {"prompt": textwrap.dedent("\n".join(stub)) + "\n", "completion": whole, "category": module}


def _unique(rows: Iterator[dict]) -> Iterator[dict]:
    seen: set[str] = set()
    for row in rows:
        key = hashlib.sha256(row["prompt"].encode()).hexdigest()
        if key not in seen:
            seen.add(key)
            yield row
