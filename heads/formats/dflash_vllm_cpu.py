"""A workaround for vLLM 0.32's CPU build serving DFlash drafters of more than one layer.

vLLM normalises every draft layer's context keys with one grouped kernel call,
`ops.rms_norm(out[L, ctx, kv, d], k, weight[L, d])` (qwen3_dflash.py `_normalize_context_k`).
The CPU kernel reads only weight row 0, so layers ≥ 1 get layer 0's k_norm weights: acceptance
drops silently (verification keeps the output right). `served_patch` replaces that method with a
per-layer torch RMSNorm while the served check's engine runs, and runs the engine in this process
(VLLM_ENABLE_V1_MULTIPROCESSING=0: vLLM's CPU platform forces `spawn`, which would not see a
patch made here). Nothing changes on a GPU or for one-layer drafters.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"


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


@contextmanager
def served_patch(export_dir: Path) -> Iterator[None]:
    """While entered, vLLM engines started in this process serve `export_dir` with per-layer context k_norm."""
    if not needs_patch(export_dir):
        yield
        return
    import torch
    import vllm.envs as envs
    from vllm.model_executor.models.qwen3_dflash import DFlashQwen3Model

    original, env = DFlashQwen3Model._normalize_context_k, os.environ.get(ENV)
    threads, affinity = torch.get_num_threads(), os.sched_getaffinity(0)  # an in-process CPU worker rebinds both
    os.environ[ENV] = "0"
    envs.disable_envs_cache()  # an engine started earlier in this process may have frozen the variables
    DFlashQwen3Model._normalize_context_k = _per_layer_k_norm
    try:
        yield
    finally:
        DFlashQwen3Model._normalize_context_k = original
        if env is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = env
        envs.disable_envs_cache()
        torch.set_num_threads(threads)
        os.sched_setaffinity(0, affinity)
