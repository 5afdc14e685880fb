"""Build (once) and cache the toy world: corpus → tokenizer → trained target → prompts.

The world lives under `$DRAFTHUB_CACHE/toyworld/<size>-<key>/` where the key hashes the size's
config, the corpus and the builder version. A build writes to a temporary directory and is
renamed into place, so a killed build never leaves a half world behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from filelock import FileLock

from distill.toyworld import corpus
from distill.toyworld.config import SIZES, WorldConfig
from distill.toyworld.target import build_target, heldout_loss, train_target
from distill.toyworld.tokenizer import train_tokenizer
from heads.formats.staging import atomic_write_text

BUILDER_VERSION = 2  # bump when the build procedure changes what it produces
SPLITS = ("train", "heldout", "heldout_repeated")  # prompt splits; the last is derived from held-out
REPEAT_SPLIT = SPLITS[2]


@dataclass(frozen=True)
class ToyWorld:
    """Paths of a built toy world."""

    root: Path

    @property
    def target_dir(self) -> Path:
        return self.root / "target"

    def prompts_file(self, split: str) -> Path:
        path = self.root / "prompts" / f"{split}.jsonl"
        if split == REPEAT_SPLIT and not path.exists():  # derived from the held-out prompts on first use
            base = [json.loads(line)["messages"] for line in self.prompts_file("heldout").read_text().splitlines()]
            docs = corpus.repeated_requests(base)
            atomic_write_text(path, "".join(json.dumps({"messages": d}) + "\n" for d in docs))  # concurrent users
        return path

    @property
    def info(self) -> dict:
        return json.loads((self.root / "world.json").read_text())


def cache_root() -> Path:
    return Path(os.environ.get("DRAFTHUB_CACHE", Path.home() / ".cache" / "drafthub"))


def _world_key(cfg: WorldConfig, corpus_digest: str) -> str:
    payload = json.dumps({"cfg": cfg.as_dict(), "corpus": corpus_digest, "v": BUILDER_VERSION}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


_LOADED: dict[tuple[str, Path], ToyWorld] = {}  # per process: a built world never changes, its corpus neither


def load_world(size: str) -> ToyWorld:
    """Return the cached toy world of `size` (`micro` or `toy`), building it first if needed.

    Hashing the corpus to find the world costs ~0.5 s, and every stage resolves the alias: remembered per
    process and cache directory once the world is built."""
    if size not in SIZES:
        raise ValueError(f"unknown toy world size {size!r}; choose one of {sorted(SIZES)}")
    key = (size, cache_root())
    if key in _LOADED and (_LOADED[key].root / "world.json").exists():
        return _LOADED[key]
    _LOADED[key] = world = _find_or_build(size)
    return world


def _find_or_build(size: str) -> ToyWorld:
    cfg = SIZES[size]
    train_files, heldout_files = corpus.list_sources()
    train_files = corpus.take_bytes(train_files, cfg.corpus_bytes)
    digest = corpus.corpus_hash(train_files + heldout_files)
    root = cache_root() / "toyworld" / f"{size}-{_world_key(cfg, digest)}"
    if (root / "world.json").exists():
        return ToyWorld(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root) + ".lock"):
        if not (root / "world.json").exists():  # another process may have built it meanwhile
            tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
            try:
                _build(cfg, train_files, heldout_files, digest, tmp)
                os.replace(tmp, root)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return ToyWorld(root)


def _token_stream(tokenizer, texts: list[str]) -> torch.Tensor:
    """Concatenate documents, each closed by the end token, into one 1-D id tensor."""
    ids: list[int] = []
    for enc in tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False):
        ids.extend(enc.ids)
        ids.append(tokenizer.eos_token_id)
    return torch.tensor(ids, dtype=torch.long)


def _chat_stream(tokenizer, docs: list[list[dict]]) -> torch.Tensor:
    ids: list[int] = []
    for doc in docs:
        ids.extend(tokenizer.apply_chat_template(doc, tokenize=True, return_dict=True)["input_ids"])
    return torch.tensor(ids, dtype=torch.long)


def _write_prompts(path: Path, docs: list[list[dict]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for doc in docs:
            f.write(json.dumps({"messages": doc}) + "\n")


def _build(cfg: WorldConfig, train_files, heldout_files, digest: str, out: Path) -> None:
    t0 = time.perf_counter()
    train_texts = [f.text for f in train_files]
    tokenizer = train_tokenizer(train_texts, cfg.vocab_size)
    t_tok = time.perf_counter() - t0

    chat_docs = corpus.chat_documents(train_files, cfg.num_chat_docs, seed=cfg.seed)
    code_stream = _token_stream(tokenizer, train_texts)
    chat_stream = _chat_stream(tokenizer, chat_docs)
    heldout_stream = _token_stream(tokenizer, [f.text for f in heldout_files])

    model = build_target(cfg, tokenizer)
    stats = train_target(model, cfg, code_stream, chat_stream)
    loss = heldout_loss(model, heldout_stream, cfg.seq_len)

    model.save_pretrained(out / "target")
    tokenizer.save_pretrained(out / "target")
    # Distill prompts come from train files (a fresh seed), eval prompts from held-out files.
    _write_prompts(
        out / "prompts" / "train.jsonl", corpus.chat_documents(train_files, cfg.num_train_prompts, seed=cfg.seed + 1)
    )
    _write_prompts(
        out / "prompts" / "heldout.jsonl", corpus.chat_documents(heldout_files, cfg.num_prompts, seed=cfg.seed + 2)
    )
    info = {
        "size": cfg.name,
        "config": cfg.as_dict(),
        "corpus_hash": digest,
        "corpus_files": {"train": len(train_files), "heldout": len(heldout_files)},
        "corpus_tokens": {"code": len(code_stream), "chat": len(chat_stream), "heldout": len(heldout_stream)},
        "parameters": sum(p.numel() for p in model.parameters()),
        "tokenizer_seconds": round(t_tok, 1),
        **stats,
        "heldout_loss": round(loss, 4),
        "build_seconds": round(time.perf_counter() - t0, 1),
        "builder_version": BUILDER_VERSION,
    }
    (out / "world.json").write_text(json.dumps(info, indent=2))
