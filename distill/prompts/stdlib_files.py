"""A long-context workload from Python's standard library (`eval_prompts=stdlib_files`): a whole module's source,
then a question about it. Answers quote the file (names, signatures, docstrings), so drafters that copy from the
context are measured where a chat over a document puts them, with no dataset download.

Only modules none of whose functions is a stdlib_code training stub are taken (distill/prompts/stdlib_code.py), so
a drafter trained on those stubs has seen no line of these files as a request. Files of 2.5–7 KB (≈ 0.8–2 k tokens)
fit a small model's context beside the answer. Built once per Python version into $DRAFTHUB_CACHE/prompt_sets/, in a
fixed shuffled order, each file with one of the questions in turn.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from distill.prompts.stdlib_code import function_stubs, prompt_set_path, stdlib_modules, stdlib_root
from heads.formats.staging import atomic_write_text

MIN_BYTES, MAX_BYTES = 2_500, 7_000
QUESTIONS = (
    "Explain what this module is for and how its main classes and functions work together.",
    "List the public classes and functions this file defines, with one sentence on what each one does.",
    "Write a short example that uses this module, with comments naming what each call does.",
    "Which names does this file import, and what does it use each of them for?",
)


def stdlib_files_file() -> Path:
    """The prompts file for this Python (built on first use): rows of {"prompt": file + question}."""
    root, path = stdlib_root(), prompt_set_path("stdlib_files")
    if not path.is_file():
        sized = (p for p in stdlib_modules(root) if MIN_BYTES <= p.stat().st_size <= MAX_BYTES)
        files = [p for p in sized if _unstubbed(p, root)]
        random.Random(0).shuffle(files)
        rows = [_row(p, root, QUESTIONS[i % len(QUESTIONS)]) for i, p in enumerate(files)]
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in rows if row))
    return path


def _unstubbed(path: Path, root: Path) -> bool:
    """No function of this file is a stdlib_code request (the training data's code stubs)."""
    return next(function_stubs(path, root), None) is None


def _row(path: Path, root: Path, question: str) -> dict | None:
    try:
        source = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, ValueError):
        return None
    module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
    return {"prompt": f"Here is the Python module `{module}`:\n\n```python\n{source.rstrip()}\n```\n\n{question}"}
