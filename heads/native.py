"""Native checkpoints of the module drafters (EAGLE-3, P-EAGLE, DFlash; Medusa and EAGLE-1 write their
serving layout with the same save_module): config.json naming the family
(`drafthub_kind`) with the architecture and settings, and the weights as safetensors. They carry no
serving settings; each family's export writes those once from here."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from heads.errors import HeadsError

CONFIG, WEIGHTS = "config.json", "model.safetensors"
NATIVE_KEY = "drafthub_kind"  # names the family in a native checkpoint's config.json


def save_module(path, config: dict, module: torch.nn.Module) -> None:
    """Write `config` as config.json and the module's state dict as safetensors into the directory `path`."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / CONFIG).write_text(json.dumps(config, indent=2))
    tensors = {k: v.detach().contiguous() for k, v in module.state_dict().items()}
    save_file(tensors, str(path / WEIGHTS), metadata={"format": "pt"})


def save_native(path, kind: str, config: dict, module: torch.nn.Module) -> None:
    """A native checkpoint: `config` plus the family key, and the module's weights."""
    save_module(path, {NATIVE_KEY: kind, **config}, module)


def read_native(path, kind: str, name: str) -> tuple[dict, dict[str, torch.Tensor]]:
    """(config, tensors) of a native checkpoint of family `kind` (`name` in the error); HeadsError otherwise."""
    path = Path(path)
    config = json.loads((path / CONFIG).read_text()) if (path / CONFIG).exists() else {}
    if config.get(NATIVE_KEY) != kind or not (path / WEIGHTS).exists():
        raise HeadsError(f"{path} is not a native {name} checkpoint (config.json with {NATIVE_KEY}: {kind}, {WEIGHTS})")
    return config, load_file(str(path / WEIGHTS))
