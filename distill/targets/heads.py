"""The target without its decoder layers: input embeddings, final norm and lm_head, read by name from its safetensors.

With features from vLLM (drafter.features=vllm) training needs nothing else of the target: EAGLE drafters copy
its embeddings, its lm_head turns stored lm_head inputs into logits, and its own final norm turns the last
layer's output into that input. For a 70B target that is 2 GiB of 131: only the files holding these tensors
are read (or downloaded). The decoder layers stay on the meta device, so a forward fails loudly.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

from distill.config import TargetConfig
from distill.errors import DistillError
from distill.targets import resolve_target
from distill.targets.load import torch_dtype

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


def final_norm(model: torch.nn.Module) -> torch.nn.Module:
    """The norm the decoder applies after its last layer (the lm_head reads its output)."""
    norm = getattr(model.get_decoder(), "norm", None)
    if norm is None:
        raise DistillError(
            f"{type(model).__name__} has no final `norm` on its decoder; drafter.features=vllm cannot rebuild "
            "the lm_head input; use drafter.features=offline"
        )
    return norm


def load_target_heads(cfg: TargetConfig, device: torch.device | str = "cpu") -> torch.nn.Module:
    """The target model with only its embeddings, final norm and lm_head materialised on `device`, frozen."""
    path = resolve_target(cfg)
    config = AutoConfig.from_pretrained(path, revision=cfg.revision, trust_remote_code=cfg.trust_remote_code)
    dtype = torch_dtype(cfg.dtype)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(
            config,
            trust_remote_code=cfg.trust_remote_code,
            dtype=None if dtype == "auto" else dtype,
        )
    names = {id(m): name for name, m in model.named_modules()}
    heads = [model.get_input_embeddings(), final_norm(model), model.get_output_embeddings()]
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    wanted = {f"{names[id(m)]}.{p}" for m in heads[: 2 if tied else 3] for p, _ in m.named_parameters()}
    tensors = read_tensors(path, cfg.revision, wanted)
    if dtype != "auto":
        tensors = {k: v.to(dtype) for k, v in tensors.items()}
    model.load_state_dict(tensors, strict=False, assign=True)
    if tied:
        model.get_output_embeddings().weight = model.get_input_embeddings().weight
    for module in heads:
        module.to(device)
    try:
        model.generation_config = GenerationConfig.from_pretrained(path, revision=cfg.revision)
    except OSError:  # no generation_config.json: eos ids then come from the tokenizer
        pass
    return model.requires_grad_(False).eval()


def read_tensors(name_or_path: str, revision: str | None, names: set[str]) -> dict[str, torch.Tensor]:
    """`names` from a safetensors checkpoint (a directory or a hub repo), reading only the files that hold them."""

    def fetch(filename: str) -> Path:
        local = Path(name_or_path, filename)
        if Path(name_or_path).is_dir():
            return local
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(name_or_path, filename, revision=revision))

    try:
        weight_map = json.loads(fetch(INDEX).read_text())["weight_map"]
    except OSError:  # no index: one file holds every tensor
        weight_map = dict.fromkeys(names, SINGLE)
    missing = sorted(n for n in names if n not in weight_map)
    if missing:
        raise DistillError(f"the target's safetensors index has no {missing}; drafter.features=vllm needs them")
    out = {}
    for filename in sorted({weight_map[n] for n in names}):
        try:
            with safe_open(str(fetch(filename)), "pt") as f:
                for n in names:
                    if weight_map[n] == filename:
                        out[n] = f.get_tensor(n)
        except (OSError, KeyError) as e:
            raise DistillError(
                f"could not read {sorted(names)} from {name_or_path}/{filename} ({e}); "
                "drafter.features=vllm reads the target's safetensors by name"
            ) from None
    return out
