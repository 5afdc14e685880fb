"""Which vLLM model runner a family needs: DSpark and DFlash2 live only in vLLM 0.32's V2 runner (Triton), which
its CPU build cannot start (config/vllm.py refuses them at start-up; ../shared/VLLM-DSPARK.md §0)."""

from __future__ import annotations

from typing import Callable, Optional


def needs_vllm_gpu_runner(name: str) -> Callable[[], Optional[str]]:
    """A consumer's `missing`: why vLLM cannot serve `name` drafters on this machine (no GPU), or None."""

    def missing() -> Optional[str]:
        import torch

        if torch.cuda.is_available():
            return None
        return (
            f"needs vLLM's GPU runner: vLLM 0.32 serves {name} drafters only with its V2 model runner (Triton, "
            "CUDA), and its CPU build refuses them at start-up; serve it there, or check it here with "
            "eval.serve=llamacpp"
        )

    return missing
