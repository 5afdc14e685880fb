"""Load a target (and its tokenizer) from whatever source names it (distill/targets/: HF names and directories,
`toyworld:<size>`, GGUF files, packaged models)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PretrainedConfig

from distill.config import TargetConfig
from distill.errors import DistillError
from distill.targets import resolve_target, source_of, target_ref
from distill.targets.known import KNOWN_TARGETS


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
            resolve_target(cfg), revision=cfg.revision, trust_remote_code=cfg.trust_remote_code
        )
    except (OSError, ValueError) as e:
        raise DistillError(
            f"could not read the config of target {cfg.name_or_path!r} ({str(e).splitlines()[0]}); "
            "check target.name_or_path"
        ) from None
    return getattr(config.get_text_config(), "max_position_embeddings", None)


def load_tokenizer(cfg: TargetConfig):
    path = resolve_target(cfg)
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
    # one without a template reads raw text; a chat prompt is refused naming its row (distill.prompts.chat)
    return tokenizer


def load_target(cfg: TargetConfig, device: torch.device | str | None = "cpu", *, setting: str = "target.name_or_path"):
    """The frozen target in eval mode on `device` (None: where loading put it, for a sharder to place).

    setting: what a load failure tells the user to fix (python -m eval names its target_path)."""
    path = resolve_target(cfg)
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
        generation = GenerationConfig.from_pretrained(resolve_target(cfg), revision=cfg.revision)
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


def target_config(target, trust_remote_code: bool = False) -> PretrainedConfig:
    """The target's config (`target`: a name or a TargetConfig) from a local directory, its source (a toy world, a
    GGUF's header), the HF cache, or KNOWN_TARGETS — never the network for a Hub id."""
    if source := source_of(target):
        return source.config(target_ref(target))
    name_or_path = target_ref(target).name
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
