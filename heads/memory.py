"""Activation memory a training forward keeps for backward, measured exactly (device-agnostic)."""

from __future__ import annotations

from typing import Callable

import torch


def saved_for_backward_bytes(forward: Callable[[], object]) -> int:
    """Bytes of the tensors autograd saves while running `forward()` (storages counted once)."""
    seen: dict[tuple, int] = {}

    def pack(t: torch.Tensor):
        storage = t.untyped_storage()
        seen[(storage.data_ptr(), t.device)] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward()
    return sum(seen.values())
