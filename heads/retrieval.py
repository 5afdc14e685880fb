"""Retrieval drafting from the target's own answers: a training-free family whose export carries a token store.

Why: a small model repeats its own phrasing across answers, so the answers distillation already wrote are the text
it is most likely to write again (REST, He et al. 2024, drafts from such a datastore; llama.cpp's static n-gram
cache, `llama-lookup-create`, is one). The export is config.json (the drafting settings) and `store.safetensors`:
the answers' tokens end to end (`tokens`, int32) and where each answer starts (`offsets`, int64, one more than
answers). config.json records the store's sha256, token and answer counts; loading refuses a store whose bytes
are not the ones indexed, so a drafter is always measured and served with the store it was published with.
drafthub's engine indexes the store in a suffix tree when it loads it (eval/proposers/retrieval.py).
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import torch
from safetensors.torch import load_file, save_file

from heads.errors import HeadsError
from heads.settings_drafter import CONFIG, SettingsDrafter

STORE = "store.safetensors"
SETTINGS = (
    "max_tree_depth", "min_request_match", "min_store_match", "max_spec_factor", "min_token_prob", "max_answers"
)  # fmt: skip
EARLIER = {"min_request_match": 1}  # a setting an earlier export lacks: the value it was measured with


def _whole(value, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class RetrievalDrafter(SettingsDrafter):
    """The drafting settings and the answers they draft from (token lists, in distillation order)."""

    kind = "retrieval"
    title = "a retrieval drafter"
    max_tree_depth: int = 24
    min_request_match: int = 1
    min_store_match: int = 1
    max_spec_factor: float = 4.0
    min_token_prob: float = 0.1
    max_answers: Optional[int] = None
    answers: tuple = field(default=(), repr=False)  # tuple of token-id tuples: the store

    def __post_init__(self):
        if not _whole(self.max_tree_depth, 2):
            raise HeadsError(f"drafter.max_tree_depth={self.max_tree_depth!r}: set an integer ≥ 2 (match + draft)")
        for name in ("min_request_match", "min_store_match"):
            value = getattr(self, name)
            if not _whole(value, 1) or value >= self.max_tree_depth:
                raise HeadsError(
                    f"drafter.{name}={value!r}: set an integer from 1 to max_tree_depth − 1 "
                    f"({self.max_tree_depth - 1}); a match shorter than this drafts nothing"
                )
        if not _number(self.max_spec_factor) or self.max_spec_factor <= 0:
            raise HeadsError(f"drafter.max_spec_factor={self.max_spec_factor!r}: set a number > 0")
        if not _number(self.min_token_prob) or not 0 <= self.min_token_prob <= 1:
            raise HeadsError(f"drafter.min_token_prob={self.min_token_prob!r}: set a probability in [0, 1]")
        if self.max_answers is not None and not _whole(self.max_answers, 1):
            raise HeadsError(f"drafter.max_answers={self.max_answers!r}: set an integer ≥ 1, or null for all")

    @classmethod
    def from_config(cls, cfg, answers: Sequence[Sequence[int]] = ()) -> "RetrievalDrafter":
        """The settings of a drafter config, with the answers to store (the first max_answers of them)."""
        store = tuple(tuple(int(t) for t in a) for a in answers if len(a))
        return cls(**{name: getattr(cfg, name) for name in SETTINGS}, answers=store[: cfg.max_answers])

    def settings(self) -> dict:
        return {name: getattr(self, name) for name in SETTINGS}

    @property
    def store_tokens(self) -> int:
        return sum(map(len, self.answers))

    def config_dict(self) -> dict:
        return {"drafthub_kind": self.kind, **self.settings()}

    def save_pretrained(self, path: str | Path) -> None:
        """config.json and the store, the store's hash and size recorded in config.json."""
        if not self.answers:
            raise HeadsError(
                "a retrieval drafter needs answers to draft from, and the distilled dataset holds none; "
                "run the distill stage (stages=[distill,eval,publish]) with data.max_prompts > 0"
            )
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        lengths = torch.tensor([0, *map(len, self.answers)], dtype=torch.int64)
        tokens = torch.tensor([t for a in self.answers for t in a], dtype=torch.int32)
        save_file({"tokens": tokens, "offsets": lengths.cumsum(0)}, str(path / STORE))
        record = {"file": STORE, "sha256": file_sha256(path / STORE), "tokens": len(tokens)}
        record["answers"] = len(self.answers)
        (path / CONFIG).write_text(json.dumps({**self.config_dict(), "store": record}, indent=2))

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "RetrievalDrafter":
        """The settings and the store, refused unless the store's bytes hash to what config.json recorded."""
        config, path = EARLIER | cls.read_settings(path), Path(path)
        missing = [name for name in (*SETTINGS, "store") if name not in config]
        if missing:
            raise HeadsError(f"{path / CONFIG} lacks {', '.join(missing)}; re-export the drafter")
        record, file = config["store"], path / STORE
        if not file.is_file():
            raise HeadsError(f"{path} has no {STORE}: a retrieval drafter drafts from it; copy the whole directory")
        if file_sha256(file) != record.get("sha256"):
            raise HeadsError(
                f"{file} is not the store this drafter was exported with (its sha256 differs from config.json's "
                "store.sha256); re-export the drafter rather than editing its store"
            )
        store = load_file(str(file))
        tokens, offsets = store["tokens"].tolist(), store["offsets"].tolist()
        answers = tuple(tuple(tokens[a:b]) for a, b in zip(offsets, offsets[1:]))
        return cls(**{name: config[name] for name in SETTINGS}, answers=answers)


def write_lookup_cache(answers: Sequence[Sequence[int]], file: Path) -> None:
    """The store as llama.cpp's static n-gram cache (`llama-lookup-create`'s output, read by `-lcs`;
    common/ngram-cache.cpp at the pinned commit): for every two consecutive tokens of an answer, the counts of the
    token that followed them. Records of int32 little-endian values, no header: the key (a, b, −1, −1), the number
    of followers, then (token, count) for each; keys and followers sorted, so equal stores give equal bytes."""
    followers: dict[tuple[int, int], Counter] = defaultdict(Counter)
    for answer in answers:
        for a, b, c in zip(answer, answer[1:], answer[2:]):
            followers[(a, b)][c] += 1
    with open(file, "wb") as out:
        for (a, b), counts in sorted(followers.items()):
            out.write(struct.pack("<5i", a, b, -1, -1, len(counts)))
            out.write(b"".join(struct.pack("<2i", t, n) for t, n in sorted(counts.items())))
