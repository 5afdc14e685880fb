"""The embedded toy worlds as a target source: `toyworld:<size>` is the world's target, `toyworld:<size>/draft` its
pretrained sibling draft LM (a drafter.init); each is built on first use into $DRAFTHUB_CACHE, then reused."""

from __future__ import annotations

from typing import Optional

from distill.errors import DistillError

PREFIX = "toyworld:"


def claims(ref) -> bool:
    return ref.name.startswith(PREFIX)


def resolve(ref) -> str:
    from distill.toyworld import load_world
    from distill.toyworld.sibling import load_sibling

    size, draft = toyworld_model(ref.name)
    return str(load_sibling(size) if draft else load_world(size).target_dir)


def built(ref) -> Optional[str]:
    from distill.toyworld.build import built_world
    from distill.toyworld.sibling import sibling_name

    size, draft = toyworld_model(ref.name)
    world = built_world(size)
    path = world and (world.root / sibling_name(size) if draft else world.target_dir)
    return str(path) if path and path.exists() else None


def identity(ref) -> str:
    """The world's directory name, which hashes its config and corpus (a sibling draft's adds its settings' key)."""
    from distill.toyworld.build import world_name
    from distill.toyworld.sibling import sibling_name

    size, draft = toyworld_model(ref.name)
    return f"{world_name(size)}/{sibling_name(size)}" if draft else world_name(size)


def config(ref):
    from distill.toyworld.config import SIBLINGS, SIZES
    from distill.toyworld.target import sibling_config, target_config

    size, draft = toyworld_model(ref.name)
    return target_config(sibling_config(SIZES[size], SIBLINGS[size]) if draft else SIZES[size])


def declared(ref) -> None:
    return None  # a toy world is built with its template and ids (distill/toyworld/tokenizer.py)


def toyworld_model(name: str) -> tuple[str, bool]:
    """(size, whether the sibling draft LM) of a `toyworld:<size>[/draft]` alias; refused when the world has none."""
    from distill.toyworld.config import SIBLINGS, SIZES

    size, _, part = name[len(PREFIX) :].partition("/")
    if size not in SIZES:
        raise DistillError(f"unknown toy world {name!r}; use one of {[PREFIX + s for s in SIZES]}")
    if part not in ("", "draft"):
        raise DistillError(f"{name!r}: a toy world holds a target and a draft LM; use {PREFIX}{size}/draft")
    if part and size not in SIBLINGS:
        raise DistillError(
            f"the toy world {size} builds no draft LM; use one of {[f'{PREFIX}{s}/draft' for s in SIBLINGS]}"
        )
    return size, bool(part)


def toyworld_prompts(name_or_path: str, split: str):
    """The toy world's prompt file for `split`, or None when the target is not a toy world."""
    if not name_or_path.startswith(PREFIX):
        return None
    from distill.toyworld import SIZES, load_world
    from distill.toyworld.build import world_splits

    size = toyworld_model(name_or_path)[0]
    splits = world_splits(SIZES[size])  # known before the world is built
    if split not in splits:
        raise DistillError(f"the toy world {size} has prompt splits {list(splits)}, not {split!r}; set data.split")
    return load_world(size).prompts_file(split)


def toyworld_corpus(name_or_path: str) -> list[str] | None:
    """The toy world's own training texts (its train-split source files), or None for other targets."""
    if not name_or_path.startswith(PREFIX):
        return None
    from distill.toyworld import SIZES, corpus

    train_files, _ = corpus.list_sources()
    return [f.text for f in corpus.take_bytes(train_files, SIZES[toyworld_model(name_or_path)[0]].corpus_bytes)]
