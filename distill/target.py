"""Load a target (and its tokenizer) by HF name, local directory or `toyworld:<size>`."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PretrainedConfig

from distill.config import TargetConfig
from distill.errors import DistillError
from distill.known_targets import KNOWN_TARGETS

TOYWORLD_PREFIX = "toyworld:"


def resolve_target(name_or_path: str) -> str:
    """A loadable name or path: `toyworld:<size>` builds (once) and returns the toy target, `toyworld:<size>/draft`
    the world's pretrained sibling draft LM (a drafter.init)."""
    if not name_or_path.startswith(TOYWORLD_PREFIX):
        return name_or_path
    from distill.toyworld import load_world
    from distill.toyworld.sibling import load_sibling

    size, draft = toyworld_model(name_or_path)
    return str(load_sibling(size) if draft else load_world(size).target_dir)


def resolve_built_target(name_or_path: str) -> str | None:
    """resolve_target without building: None for a toy world (or its draft LM) not in the cache yet."""
    if not name_or_path.startswith(TOYWORLD_PREFIX):
        return name_or_path
    from distill.toyworld.build import built_world
    from distill.toyworld.sibling import sibling_name

    size, draft = toyworld_model(name_or_path)
    world = built_world(size)
    path = world and (world.root / sibling_name(size) if draft else world.target_dir)
    return str(path) if path and path.exists() else None


def toyworld_model(name: str) -> tuple[str, bool]:
    """(size, whether the sibling draft LM) of a `toyworld:<size>[/draft]` alias; refused when the world has none."""
    from distill.toyworld.config import SIBLINGS, SIZES

    size, _, part = name[len(TOYWORLD_PREFIX) :].partition("/")
    if size not in SIZES:
        raise DistillError(f"unknown toy world {name!r}; use one of {[TOYWORLD_PREFIX + s for s in SIZES]}")
    if part not in ("", "draft"):
        raise DistillError(f"{name!r}: a toy world holds a target and a draft LM; use {TOYWORLD_PREFIX}{size}/draft")
    if part and size not in SIBLINGS:
        with_draft = [f"{TOYWORLD_PREFIX}{s}/draft" for s in SIBLINGS]
        raise DistillError(f"the toy world {size} builds no draft LM; use one of {with_draft}")
    return size, bool(part)


def toyworld_prompts(name_or_path: str, split: str):
    """The toy world's prompt file for `split`, or None when the target is not a toy world."""
    if not name_or_path.startswith(TOYWORLD_PREFIX):
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
    if not name_or_path.startswith(TOYWORLD_PREFIX):
        return None
    from distill.toyworld import SIZES, corpus

    train_files, _ = corpus.list_sources()
    return [f.text for f in corpus.take_bytes(train_files, SIZES[toyworld_model(name_or_path)[0]].corpus_bytes)]


def torch_dtype(name: str):
    if name == "auto":
        return "auto"
    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]
    except KeyError:
        raise DistillError(f"unknown dtype {name!r}; use float32, bfloat16, float16 or auto") from None


def target_context(cfg: TargetConfig) -> int | None:
    """The target's context length (max_position_embeddings) from its config alone; None where it names none."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(
            resolve_target(cfg.name_or_path), revision=cfg.revision, trust_remote_code=cfg.trust_remote_code
        )
    except (OSError, ValueError) as e:
        raise DistillError(
            f"could not read the config of target {cfg.name_or_path!r} ({str(e).splitlines()[0]}); "
            "check target.name_or_path"
        ) from None
    return getattr(config.get_text_config(), "max_position_embeddings", None)


def load_tokenizer(cfg: TargetConfig):
    path = resolve_target(cfg.name_or_path)
    if path.startswith(("/", "./", "../", "~")) and not Path(path).expanduser().exists():
        raise DistillError(f"target.name_or_path={path} does not exist; give a local HF model directory or a Hub id")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, revision=cfg.revision, trust_remote_code=cfg.trust_remote_code)
    except OSError as e:
        raise DistillError(
            f"could not load the tokenizer of {cfg.name_or_path!r} ({str(e).splitlines()[0]}); "
            "check target.name_or_path"
        ) from None
    if cfg.chat_template is not None:
        tokenizer.chat_template = cfg.chat_template
    if not tokenizer.chat_template:
        raise DistillError(
            f"the tokenizer of {cfg.name_or_path!r} has no chat template; "
            "set target.chat_template to the Jinja template the target was trained with"
        )
    return tokenizer


def load_target(cfg: TargetConfig, device: torch.device | str | None = "cpu", *, setting: str = "target.name_or_path"):
    """The frozen target in eval mode on `device` (None: where loading put it, for a sharder to place).

    setting: what a load failure tells the user to fix (python -m eval names its target_path)."""
    path = resolve_target(cfg.name_or_path)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            path,
            revision=cfg.revision,
            dtype=torch_dtype(cfg.dtype),
            trust_remote_code=cfg.trust_remote_code,
            attn_implementation=cfg.attn_implementation,
            use_safetensors=True,
        )
    except OSError as e:
        raise no_safetensors(path, setting, e) or DistillError(
            f"could not load target {cfg.name_or_path!r} ({str(e).splitlines()[0]}); check {setting}"
        ) from None
    model.requires_grad_(False)
    return model.eval() if device is None else model.eval().to(device)


def no_safetensors(path: str, setting: str, error: OSError | None = None) -> DistillError | None:
    """The one message (distill, the eval stage, python -m eval) for a target with only pickled weights, which
    drafthub never loads (unpickling runs code); None when that is not the problem. A local directory is judged
    by its files, before anything loads; a Hub repo by transformers' `error`."""
    local = Path(path).expanduser()
    if local.is_dir():
        pickled = sorted(p.name for p in local.glob("pytorch_model*.bin"))
        if not pickled or any(local.glob("*.safetensors")):
            return None
        found = f"only {', '.join(pickled[:2])}{' …' if len(pickled) > 2 else ''}"
    elif error is not None and "model.safetensors" in str(error):
        found = "no model.safetensors"
    else:
        return None
    return DistillError(
        f"target {path} has {found}: drafthub loads safetensors weights only; convert the weights "
        f"(e.g. model.save_pretrained(dir, safe_serialization=True)) and pass {setting}=dir"
    )


def eos_token_ids(model, tokenizer) -> set[int]:
    """The ids that end an answer: the generation config's (one or several), else the tokenizer's."""
    eos = model.generation_config.eos_token_id
    ids = eos if isinstance(eos, (list, tuple)) else ([] if eos is None else [eos])
    return set(ids) or {tokenizer.eos_token_id}


def eos_token_ids_of(cfg: TargetConfig, tokenizer) -> set[int]:
    """`eos_token_ids` without loading the weights (for engines that load the target themselves)."""
    from transformers import GenerationConfig

    try:
        generation = GenerationConfig.from_pretrained(resolve_target(cfg.name_or_path), revision=cfg.revision)
    except OSError:  # no generation_config.json: the tokenizer's end token
        return {tokenizer.eos_token_id}
    return eos_token_ids(type("Target", (), {"generation_config": generation}), tokenizer)


def padding_id(tokenizer, eos_ids=()) -> int:
    """The id that fills padded positions: the tokenizer's pad token, else an end token, else 0.

    Padded positions are masked out of attention and loss, so any id in the vocabulary serves; Llama-3.x
    tokenizers ship with no pad token, and GPT-2's with neither pad nor a distinct eos."""
    for candidate in (tokenizer.pad_token_id, *sorted(eos_ids), tokenizer.eos_token_id):
        if candidate is not None:
            return int(candidate)
    return 0


def target_config(name_or_path: str, trust_remote_code: bool = False) -> PretrainedConfig:
    """The target's config from a local directory, the toy world, the HF cache, or KNOWN_TARGETS — never the network."""
    if name_or_path.startswith(TOYWORLD_PREFIX):
        from distill.toyworld.config import SIBLINGS, SIZES
        from distill.toyworld.target import sibling_config
        from distill.toyworld.target import target_config as toy_config

        size, draft = toyworld_model(name_or_path)
        return toy_config(sibling_config(SIZES[size], SIBLINGS[size]) if draft else SIZES[size])
    if Path(name_or_path, "config.json").is_file():
        return AutoConfig.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
    if name_or_path in KNOWN_TARGETS:
        fields = dict(KNOWN_TARGETS[name_or_path])
        return AutoConfig.for_model(fields.pop("model_type"), **fields)
    try:
        return AutoConfig.from_pretrained(name_or_path, local_files_only=True, trust_remote_code=trust_remote_code)
    except (OSError, ValueError):
        raise DistillError(
            f"no config.json for {name_or_path!r}: not a local directory, not in the HF cache, "
            f"not among the known targets {sorted(KNOWN_TARGETS)}; "
            f"download it (`hf download {name_or_path} config.json --local-dir DIR`) and set target.name_or_path=DIR"
        ) from None
