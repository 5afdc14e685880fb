"""The toy world's chat tasks, built from stdlib sources: the kinds of request that decide how speculation pays.

- completion: a code prefix stopping inside a function or class; the answer finishes it (the target's own text: what
  a draft LM learns).
- edit: an instruction and a fenced code block; the answer is the block again, fenced, with one change (rename,
  re-indent, add a line, drop the comments) — most of it copied from the prompt, as in code edits.
- long_context: a long stretch of a file and a question; the answer quotes the text (a function, a docstring,
  the names it defines) — the summarisation/RAG analogue.
- multi_turn: a completion or quote, then an edit of that first answer — the second answer copies the first.

Everything is deterministic for a seed. Each document is a conversation of {role, content} messages.
"""

from __future__ import annotations

import keyword
import random
import re
from typing import Callable, Optional

from distill.toyworld.corpus import SourceFile

KINDS = ("completion", "edit", "long_context", "multi_turn")
# Bumped when a kind's documents change (part of a task world's cache key). 2: edits fence their code and add
# lines at the end. 3: completions finish a function or class.
FORMAT_VERSION = 3
_IDENT = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]{2,}\b")
_DEF = re.compile(r"^(\s*)(?:async\s+)?(def|class)\s+([A-Za-z_][A-Za-z0-9_]*)")
_RESERVED = set(keyword.kwlist) | {"self", "cls", "None", "True", "False", "print", "len", "str", "int", "dict"}
_IMPORTS = ("import os", "import sys", "import re", "from typing import Any", "import logging", "import json")

Doc = list[dict]


def _chat(*turns: str) -> Doc:
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": t} for i, t in enumerate(turns)]


def _span(rng: random.Random, lines: list[str], low: int, high: int) -> Optional[list[str]]:
    if len(lines) <= low:
        return None
    n = rng.randint(low, min(high, len(lines) - 1))
    start = rng.randrange(0, len(lines) - n)
    out = lines[start : start + n]
    return out if "".join(out).strip() else None


def completion(rng: random.Random, lines: list[str]) -> Optional[Doc]:
    """A code prefix that stops inside a function or class; the answer finishes it, ending where the block ends (as
    an assistant completing a function stops there: an answer cut after a random number of lines gives no stop to
    learn, and greedy answers ran on to their budget and looped)."""
    span = _span(rng, lines, 8, 48)
    if span is None:
        return None
    blocks = [b for b in _blocks(span) if 3 <= b[3] - b[2] <= 24]
    if not blocks:
        return None
    _, _, first, end = rng.choice(blocks)
    cut = rng.randint(first + 1, end - 2)
    prefix, cont = "".join(span[:cut]), "".join(span[cut:end])
    return _chat(prefix, cont) if prefix.strip() and cont.strip() else None


# ---- edits ------------------------------------------------------------------------------------------------------


def _rename(rng: random.Random, code: str, names: list[str]) -> Optional[tuple[str, str]]:
    found = sorted({m for m in _IDENT.findall(code) if m not in _RESERVED})
    if not found:
        return None
    old = rng.choice(found)
    new = rng.choice(names)
    if new == old or re.search(rf"\b{re.escape(new)}\b", code):
        return None
    return f"Rename `{old}` to `{new}`.", re.sub(rf"\b{re.escape(old)}\b", new, code)


def _reindent(rng: random.Random, code: str, names: list[str]) -> Optional[tuple[str, str]]:
    if not re.search(r"^    ", code, re.M):
        return None
    out = re.sub(r"^((?:    )+)", lambda m: "  " * (len(m.group(1)) // 4), code, flags=re.M)
    return "Use 2-space indentation.", out


def _add_line(rng: random.Random, code: str, names: list[str]) -> Optional[tuple[str, str]]:
    """At the end: an answer opening with a new line teaches "after the fence comes an import", not the block."""
    line = rng.choice(_IMPORTS)
    return f"Add the line `{line}` at the end.", f"{code if code.endswith(chr(10)) else code + chr(10)}{line}\n"


def _drop_comments(rng: random.Random, code: str, names: list[str]) -> Optional[tuple[str, str]]:
    kept = [ln for ln in code.splitlines(keepends=True) if not ln.lstrip().startswith("#")]
    if len(kept) == len(code.splitlines()) or not "".join(kept).strip():
        return None
    return "Remove the comment lines.", "".join(kept)


EDITS: tuple[Callable, ...] = (_rename, _rename, _reindent, _add_line, _drop_comments)  # renames: twice as often


def apply_edit(rng: random.Random, code: str, names: list[str]) -> Optional[tuple[str, str]]:
    """(instruction, edited code) for one random applicable edit, or None."""
    for edit in rng.sample(EDITS, len(EDITS)):
        if (done := edit(rng, code, names)) is not None and done[1] != code:
            return done
    return None


def fenced(code: str) -> str:
    """A code block as chat models write one. In an edit, the answer's opening fence repeats the prompt's, so a model
    that copies knows where the block it repeats begins (without it, greedy answers went astray at the first token)."""
    return f"```python\n{code if code.endswith(chr(10)) else code + chr(10)}```"


def edit(rng: random.Random, lines: list[str], names: list[str]) -> Optional[Doc]:
    """An edit of a 6–30 line block, fenced: the answer copies the block with the change."""
    span = _span(rng, lines, 6, 30)
    while span and len("".join(span)) > 1000:
        span = span[:-1]
    if not span or len(span) < 4:
        return None
    code = "".join(span)
    done = apply_edit(rng, code, names)
    return _chat(f"{done[0]}\n\n{fenced(code)}", fenced(done[1])) if done else None


# ---- long context -----------------------------------------------------------------------------------------------


def _blocks(lines: list[str]) -> list[tuple[str, str, int, int]]:
    """(kind, name, first, end) of each def/class whose body ends inside `lines` (end: the first line after)."""
    out = []
    for i, line in enumerate(lines):
        m = _DEF.match(line)
        if not m:
            continue
        indent, j = len(m.group(1)), i + 1
        while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent):
            j += 1
        while j > i + 1 and not lines[j - 1].strip():
            j -= 1
        if j < len(lines):  # the block closes inside the text
            out.append((m.group(2), m.group(3), i, j))
    return out


def _docstring(block: list[str]) -> Optional[str]:
    text = "".join(block[1:])
    m = re.match(r'\s*(?:[rRbBuU]?)("""|\'\'\')(.*?)\1', text, re.S)
    return m.group(2).strip("\n") if m and m.group(2).strip() else None


def long_context(rng: random.Random, lines: list[str], max_chars: int = 2400) -> Optional[Doc]:
    """A long stretch of a file, then a question whose answer quotes it."""
    span = _span(rng, lines, 30, 120)
    while span and len("".join(span)) > max_chars:
        span = span[:-1]
    if not span or len(span) < 12:
        return None
    blocks = [b for b in _blocks(span) if b[3] - b[2] <= 30]
    if not blocks:
        return None
    text = "".join(span)
    kind, name, first, end = rng.choice(blocks)
    question = rng.randrange(3)
    if question == 0:
        answer = "".join(span[first:end])
        ask = f"Quote the {'function' if kind == 'def' else 'class'} `{name}` from the code above."
    elif question == 1 and (doc := _docstring(span[first:end])):
        answer, ask = doc + "\n", f"What does the docstring of `{name}` say? Quote it."
    else:
        names = [b[1] for b in _blocks(span)]
        answer, ask = "".join(f"{n}\n" for n in dict.fromkeys(names)), "List the names defined in the code above."
    return _chat(f"{text}\n{ask}", answer)


# ---- multi-turn -------------------------------------------------------------------------------------------------


def _follow_up(instruction: str) -> str:
    """The edit's instruction, said of the previous answer."""
    if instruction.startswith("Rename"):
        return instruction.replace("Rename", "In your answer, rename", 1)
    if instruction.startswith("Add the line"):
        return instruction.replace("at the end.", "at the end of your answer.")
    return {"Use 2-space indentation.": "Rewrite your answer with 2-space indentation."}.get(
        instruction, "Remove the comment lines from your answer."
    )


def multi_turn(rng: random.Random, lines: list[str], names: list[str]) -> Optional[Doc]:
    """A first task (completion or quote), then an edit of its answer: the second answer copies the first."""
    first = long_context(rng, lines, max_chars=1600) if rng.random() < 0.5 else completion(rng, lines)
    if first is None or len(first[1]["content"]) < 40:
        return None
    done = apply_edit(rng, first[1]["content"], names)
    if done is None:
        return None
    return first + _chat(_follow_up(done[0]), done[1])


# ---- documents --------------------------------------------------------------------------------------------------


def identifier_pool(files: list[SourceFile], limit: int = 4000) -> list[str]:
    """Identifiers of the files (sorted, deterministic), for the new names of renames."""
    seen: dict[str, None] = {}
    for f in files:
        for m in _IDENT.findall(f.text):
            if m not in _RESERVED and len(m) <= 20:
                seen.setdefault(m, None)
    return sorted(seen)[:: max(1, len(seen) // limit)]


def documents(
    files: list[SourceFile],
    num: int,
    seed: int,
    kinds: tuple[str, ...] = KINDS,
    fits: Callable[[Doc], bool] = lambda doc: True,
) -> list[tuple[str, Doc]]:
    """`num` (kind, conversation) pairs, the kinds in turn, drawn from `files`; `fits` refuses the ones too long for
    the target's context."""
    rng = random.Random(seed)
    names = identifier_pool(files)
    sources = [f.text.splitlines(keepends=True) for f in files]
    sources = [lines for lines in sources if len(lines) > 40]
    makers = {
        "completion": lambda lines: completion(rng, lines),
        "edit": lambda lines: edit(rng, lines, names),
        "long_context": lambda lines: long_context(rng, lines),
        "multi_turn": lambda lines: multi_turn(rng, lines, names),
    }
    out: list[tuple[str, Doc]] = []
    misses = 0
    while len(out) < num and sources and misses < 100 * num + 1000:
        kind = kinds[len(out) % len(kinds)]
        doc = makers[kind](rng.choice(sources))
        if doc is None or not fits(doc):
            misses += 1
            continue
        out.append((kind, doc))
    return out
