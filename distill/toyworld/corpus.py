"""The toy world's corpus: the running interpreter's stdlib sources, split by path hash.

Everything here is deterministic: the same interpreter gives the same files, the same
train/held-out split and the same chat documents for a given seed.
"""

from __future__ import annotations

import hashlib
import random
import sysconfig
from dataclasses import dataclass
from pathlib import Path

_SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "__pycache__", "encodings", "pydoc_data"}
_MAX_FILE_BYTES = 150_000  # larger files are mostly data tables, not code


@dataclass(frozen=True)
class SourceFile:
    relpath: str
    text: str


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _path_bucket(relpath: str) -> int:
    return int(hashlib.sha1(relpath.encode()).hexdigest(), 16) % 1000


def list_sources(heldout_per_mille: int = 50) -> tuple[list[SourceFile], list[SourceFile]]:
    """Return (train, heldout) stdlib sources; tests, codec tables and huge data files excluded."""
    root = stdlib_root()
    train, heldout = [], []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if _SKIP_DIRS.intersection(path.relative_to(root).parts):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if not text.strip() or len(text) > _MAX_FILE_BYTES:
            continue
        bucket = _path_bucket(rel)
        (heldout if bucket < heldout_per_mille else train).append(SourceFile(rel, text))
    # Hash order mixes packages, so a byte budget takes a varied sample, not one package.
    key = lambda f: hashlib.sha1(f.relpath.encode()).hexdigest()  # noqa: E731
    return sorted(train, key=key), sorted(heldout, key=key)


def take_bytes(files: list[SourceFile], budget: int) -> list[SourceFile]:
    """The first files (in hash order) whose total size fits `budget` bytes (0 = all)."""
    if budget <= 0:
        return files
    out, total = [], 0
    for f in files:
        if total >= budget:
            break
        out.append(f)
        total += len(f.text)
    return out


def corpus_hash(files: list[SourceFile]) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.relpath.encode())
        h.update(hashlib.sha256(f.text.encode()).digest())
    return h.hexdigest()[:16]


def chat_documents(
    files: list[SourceFile],
    num: int,
    seed: int,
    prefix_lines: tuple[int, int] = (4, 20),
    continuation_lines: tuple[int, int] = (2, 6),
) -> list[list[dict]]:
    """Chat conversations asking to continue a code prefix; the assistant continues it.

    The user message is the raw code prefix, the assistant message the next few lines,
    as in the held-out prompt set the distill stage regenerates.
    """
    rng = random.Random(seed)
    docs = []
    candidates = [f.text.splitlines(keepends=True) for f in files]
    candidates = [lines for lines in candidates if len(lines) > prefix_lines[1] + continuation_lines[1]]
    while len(docs) < num and candidates:
        lines = rng.choice(candidates)
        n_prefix = rng.randint(*prefix_lines)
        n_cont = rng.randint(*continuation_lines)
        start = rng.randrange(0, len(lines) - n_prefix - n_cont)
        prefix = "".join(lines[start : start + n_prefix])
        cont = "".join(lines[start + n_prefix : start + n_prefix + n_cont])
        if not prefix.strip() or not cont.strip():
            continue
        docs.append([{"role": "user", "content": prefix}, {"role": "assistant", "content": cont}])
    return docs


def repeated_requests(rows: list, block: int = 16) -> list:
    """The repeated-requests workload: every `block` held-out rows (conversations), then the same ones again.

    Agents and pipelines re-send near-identical requests; a drafter that remembers earlier outputs
    (suffix decoding's global tree) drafts the repeats whole, while prompt lookup, which reads only
    the request itself, gains nothing. (Copying from the prompt itself is the `edit` task kind's
    workload: distill/toyworld/tasks.py.)
    """
    out = []
    for start in range(0, len(rows), block):
        chunk = rows[start : start + block]
        out += chunk + chunk
    return out
