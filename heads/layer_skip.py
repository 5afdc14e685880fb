"""Self-speculative drafting by layer skipping: the target itself with some decoder layers left out.

The drafter shares the target's embeddings, final norm and lm_head and keeps a subset of its
decoder layers, in order (SWIFT, Xia et al. 2024; Draft & Verify, Zhang et al. 2024). No extra
model is trained: which layers to skip is searched (train/setups/layer_skip.py), optionally
followed by a short fine-tune of the kept layers' copy. The export is a plain HF causal LM (the
target's config with fewer layers and the kept weights), so transformers' `assistant_model` and
vLLM's `draft_model` serve it as they are; `config.json` also records which target layers it
kept, under `drafthub_layer_skip`, which both ignore.

`skipping(target, skip)` runs the target's own forward with those layers left out, without
copying any weight: the search scores candidates with it, and the tests check that the exported
drafter's logits equal it.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from torch import nn
from transformers import AutoModelForCausalLM

from heads.draft_lm import DraftLM
from heads.errors import HeadsError

LAYER_SKIP_KEY = "drafthub_layer_skip"  # config.json entry: {"target_num_hidden_layers", "skipped_layers"}


def check_skip_layers(skip: Sequence[int], num_layers: int, setting: str = "drafter.skip_layers") -> None:
    """Raise HeadsError unless `skip` names distinct layers of a `num_layers`-layer target and keeps one."""
    skip = list(skip)
    if len(set(skip)) != len(skip) or any(not 0 <= i < num_layers for i in skip):
        raise HeadsError(f"{setting}={skip} must be distinct decoder layer indices in 0..{num_layers - 1}")
    if len(skip) >= num_layers:
        raise HeadsError(
            f"{setting}={skip} skips every one of the target's {num_layers} layers; keep at least one "
            "(or set it to null to search which layers to skip)"
        )


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layer list of an HF causal LM (`model.model.layers`, as Llama, Qwen, Mistral … keep it)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise HeadsError(
            f"{type(model).__name__} keeps no decoder layer list at .model.layers; layer skipping supports the "
            "HF decoder-only causal LMs that do (Llama, Qwen, Mistral, Gemma …)"
        )
    return layers


@contextmanager
def skipping(target: nn.Module, skip: Sequence[int]) -> Iterator[nn.Module]:
    """The target with decoder layers `skip` left out, for forwards without a KV cache; restored on exit.

    Zero-copy: the kept layers are the target's own modules. A cache would be indexed by each kept
    layer's original index, so use `use_cache=False` inside (the search does).
    """
    layers = decoder_layers(target)
    check_skip_layers(skip, len(layers))
    kept = nn.ModuleList(layer for i, layer in enumerate(layers) if i not in set(skip))
    target.model.layers = kept
    try:
        yield target
    finally:
        target.model.layers = layers


def skipped_config(config, skip: Sequence[int]):
    """The target's config for a model without decoder layers `skip` (per-layer lists cut alike)."""
    kept = [i for i in range(config.num_hidden_layers) if i not in set(skip)]
    config = copy.deepcopy(config)
    for name in ("layer_types", "sliding_window_pattern_list"):  # per-layer settings some architectures carry
        values = getattr(config, name, None)
        if isinstance(values, (list, tuple)) and len(values) == config.num_hidden_layers:
            setattr(config, name, [values[i] for i in kept])
    config.num_hidden_layers = len(kept)
    return config


class LayerSkipDrafter(DraftLM):
    """A draft LM made of the target's embeddings, kept decoder layers, final norm and lm_head."""

    kind = "layer_skip"

    def __init__(self, model: nn.Module, skipped_layers: Sequence[int], target_num_hidden_layers: int):
        super().__init__(model)
        self.skipped_layers = sorted(skipped_layers)
        self.target_num_hidden_layers = target_num_hidden_layers

    @classmethod
    def from_target(cls, target: nn.Module, skip: Sequence[int]) -> "LayerSkipDrafter":
        """A copy of `target` without decoder layers `skip` (its weights copied, the target untouched)."""
        layers = decoder_layers(target)
        check_skip_layers(skip, len(layers))
        kept = [i for i in range(len(layers)) if i not in set(skip)]
        model = AutoModelForCausalLM.from_config(skipped_config(target.config, skip))
        model.to(dtype=next(target.parameters()).dtype)
        state = {}
        for name, tensor in target.state_dict().items():
            parts = name.split(".")
            if parts[:2] == ["model", "layers"]:
                index = int(parts[2])
                if index not in kept:
                    continue
                name = ".".join(["model", "layers", str(kept.index(index)), *parts[3:]])
            state[name] = tensor
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected or [m for m in missing if not m.endswith("lm_head.weight")]:  # a tied head is no tensor
            raise HeadsError(f"copying the target's kept layers left {missing} unset and {unexpected} unused")
        model.generation_config = copy.deepcopy(target.generation_config)
        return cls(model.to(next(target.parameters()).device), skip, len(layers))

    def freeze_shared(self) -> None:
        """Train only the kept layers: embeddings, final norm and lm_head stay the target's."""
        self.model.get_input_embeddings().requires_grad_(False)
        self.model.get_output_embeddings().requires_grad_(False)
        self.model.model.norm.requires_grad_(False)

    def save_pretrained(self, path: str | Path) -> None:
        model = self.merged()
        setattr(
            model.config,
            LAYER_SKIP_KEY,
            {"target_num_hidden_layers": self.target_num_hidden_layers, "skipped_layers": self.skipped_layers},
        )
        model.save_pretrained(path, safe_serialization=True)

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs) -> "LayerSkipDrafter":
        model = AutoModelForCausalLM.from_pretrained(path, use_safetensors=True, **kwargs)
        record = getattr(model.config, LAYER_SKIP_KEY, None)
        if not isinstance(record, dict) or "skipped_layers" not in record:
            raise HeadsError(f"{path} is not a layer-skip drafter: its config.json lacks {LAYER_SKIP_KEY}")
        return cls(model, record["skipped_layers"], record["target_num_hidden_layers"])
