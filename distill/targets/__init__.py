"""Where a target comes from. Each source turns its name into a plain local HF directory once (cached by content,
atomically); everything downstream loads that directory with `from_pretrained` and never learns where it came from
(llama.cpp alone asks a GGUF-made directory for its original file). A name no source claims is an HF directory or a
Hub id, loaded as it is. Adding a source is one module with the parts below and one line of SOURCES.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from distill.targets import gguf, package, toyworld

# Each source module has: claims(ref) -> bool; resolve(ref) -> directory (built or fetched on first use);
# built(ref) -> directory or None (never builds); identity(ref) -> content digest; config(ref) -> its config;
# declared(ref) -> what it declares about its tokenizer before any weights load (declared_tokenizer), or None.
PARTS = ("claims", "resolve", "built", "identity", "config", "declared")
SOURCES = {"toyworld": toyworld, "package": package, "gguf": gguf}  # the first that claims a name serves it
for _name, _module in SOURCES.items():
    if _missing := [p for p in PARTS if not callable(getattr(_module, p, None))]:
        raise ImportError(f"target source {_name!r} ({_module.__name__}) lacks {_missing}")


@dataclass(frozen=True)
class TargetRef:
    """What names a target: `name` (a directory, Hub id, .gguf file or source alias), a GGUF file inside it, the
    Hub revision."""

    name: str
    gguf_file: Optional[str] = None
    revision: Optional[str] = None


def target_ref(target) -> TargetRef:
    """A TargetRef of a name (str) or of a TargetConfig's name_or_path, gguf_file and revision."""
    if isinstance(target, TargetRef):
        return target
    if isinstance(target, str):
        return TargetRef(target)
    return TargetRef(target.name_or_path, getattr(target, "gguf_file", None), getattr(target, "revision", None))


def source_of(target):
    """The source module that serves `target`, or None for a plain HF directory or Hub id."""
    ref = target_ref(target)
    return next((module for module in SOURCES.values() if module.claims(ref)), None)


def resolve_target(target) -> str:
    """A loadable HF directory or Hub id for `target` (a name or a TargetConfig), built or fetched once if needed."""
    source = source_of(target)
    return source.resolve(target_ref(target)) if source else target_ref(target).name


def resolve_built_target(target) -> Optional[str]:
    """resolve_target without building or fetching: None where the source has not made the directory yet."""
    source = source_of(target)
    return source.built(target_ref(target)) if source else target_ref(target).name


def source_identity_of(target) -> Optional[str]:
    """The content a source name stands for (a toy world's key, a GGUF's digest); None for a plain name."""
    source = source_of(target)
    return source.identity(target_ref(target)) if source else None


def declared_tokenizer(target) -> Optional[dict]:
    """What a target declares about its tokenizer before anything loads — {"chat_template": text or None,
    "special_ids": {role: id}} — from a GGUF's header or a local directory's tokenizer files; None where only
    loading it would tell (a Hub id, a toy world): checks made up front then wait for the tokenizer."""
    source = source_of(target)
    if source:
        return source.declared(target_ref(target))
    return _declared_by_files(Path(target_ref(target).name).expanduser())


def _declared_by_files(directory: Path) -> Optional[dict]:
    """A local HF directory's template (chat_template.jinja, else tokenizer_config.json's) and special tokens' ids."""
    settings_file, tokenizer_file = directory / "tokenizer_config.json", directory / "tokenizer.json"
    if not (settings_file.is_file() and tokenizer_file.is_file()):
        return None
    settings = json.loads(settings_file.read_text())
    template = directory / "chat_template.jinja"
    chat_template = template.read_text() if template.is_file() else settings.get("chat_template")
    if isinstance(chat_template, list):  # several named templates: the default one is what chat uses
        chat_template = next((t["template"] for t in chat_template if t.get("name") == "default"), None)
    ids = {t["content"]: t["id"] for t in json.loads(tokenizer_file.read_text()).get("added_tokens", [])}
    special = {
        role: ids[token]
        for role in ("bos", "eos", "pad", "unk", "sep", "mask")
        if isinstance(token := _token_text(settings.get(f"{role}_token")), str) and token in ids
    }
    return {"chat_template": chat_template or None, "special_ids": special}


def _token_text(value):
    return value.get("content") if isinstance(value, dict) else value
