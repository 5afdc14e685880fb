"""A workaround for vLLM 0.32's CPU build serving DFlash drafters of more than one layer.

vLLM normalises every draft layer's context keys with one grouped kernel call,
`ops.rms_norm(out[L, ctx, kv, d], k, weight[L, d])` (qwen3_dflash.py `_normalize_context_k`).
The CPU kernel reads only weight row 0, so layers ≥ 1 get layer 0's k_norm weights: acceptance
drops silently (verification keeps the output right).

The fix is a vLLM general plugin (`vllm.general_plugins` entry point `drafthub_dflash_cpu_k_norm`
in pyproject.toml): vLLM loads it in every process it starts — the engine core and its workers
are spawned, so a patch made only in the caller would not reach them — and it replaces the
method, on a host with no GPU, with one that takes a per-layer torch RMSNorm whenever
DRAFTHUB_DFLASH_CPU_K_NORM=1 (read at each call, so an engine built in a process that loaded the
plugin earlier, as vLLM's in-process engine core is, follows the variable too).
The served check sets the variable while it serves a multi-layer DFlash export; users serving
one on vLLM's CPU build themselves can set it too. Unset, vLLM's own method runs.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ENV = "DRAFTHUB_DFLASH_CPU_K_NORM"


def needs_patch(export_dir: Path) -> bool:
    """Only CPU serving of drafters with more than one layer is affected."""
    import torch

    layers = json.loads((Path(export_dir) / "config.json").read_text()).get("num_hidden_layers", 1)
    return layers > 1 and not torch.cuda.is_available()


def _per_layer_k_norm(self, all_k):
    """all_k (L, ctx, kv, d) → RMSNorm over d with layer l's own k_norm weight (what the GPU kernel does)."""
    import torch

    x = all_k.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self._rms_norm_eps)
    return (x * self._k_norm_weights.float()[:, None, None, :]).to(all_k.dtype)


def register() -> None:
    """vLLM general plugin: per-layer context k_norm for DFlash on CPU, while DRAFTHUB_DFLASH_CPU_K_NORM=1."""
    import torch

    if torch.cuda.is_available():
        return
    from vllm.model_executor.models.qwen3_dflash import DFlashQwen3Model

    vllms = DFlashQwen3Model._normalize_context_k
    if getattr(vllms, "drafthub", False):  # registered already (vLLM loads plugins once per process)
        return

    def normalize_context_k(self, all_k):
        return _per_layer_k_norm(self, all_k) if os.environ.get(ENV) == "1" else vllms(self, all_k)

    normalize_context_k.drafthub = True
    DFlashQwen3Model._normalize_context_k = normalize_context_k


@contextmanager
def served_patch(export_dir: Path) -> Iterator[None]:
    """While entered, vLLM engines started from this process serve `export_dir` with per-layer context k_norm."""
    if not needs_patch(export_dir):
        yield
        return
    previous = os.environ.get(ENV)
    os.environ[ENV] = "1"  # inherited by the engine processes vLLM spawns, where the plugin reads it
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = previous
