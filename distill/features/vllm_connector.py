"""vLLM's hidden-states connector, made to run on vLLM's CPU build (imported by vLLM's worker by module path).

`ExampleHiddenStatesConnector` (vLLM 0.32) copies each finished request's states into pinned host memory on a
CUDA stream and polls a CUDA event; CPU-only torch has neither (`pin_memory=True requires a CUDA or other
accelerator backend`, and the CPU stand-in event has no `query`). Here the states are already in host memory,
so the copy is synchronous and the event is always done. On a GPU the stock connector is used.
"""

from __future__ import annotations

import fcntl
import os
from functools import partial

import torch

NAME = "CpuHiddenStatesConnector"  # what vLLM's worker asks this module for (kv_connector)


def __getattr__(name: str):
    """The connector class, built on first request: vLLM is imported only by the worker that asks for it (PEP 562),
    never by drafthub importing this module."""
    if name != NAME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[NAME] = cls = _connector_class()
    return cls


class _Done:
    """A finished copy: what the connector's write thread and poller ask of an event."""

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True


def _connector_class() -> type:
    from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
        ExampleHiddenStatesConnector,
        extract_from_kv_cache,
    )

    class CpuHiddenStatesConnector(ExampleHiddenStatesConnector):
        def _submit_async_write(self, pending) -> None:
            if not self._is_tp_rank_zero:  # rank 0 alone writes (the states are whole on every rank)
                return
            blocks = torch.tensor(pending.block_ids, dtype=torch.long)
            slots = (torch.arange(self._block_size).reshape(1, -1) + blocks.reshape(-1, 1) * self._block_size).flatten()
            states = extract_from_kv_cache(self._kv_cache, slots.to(self._kv_cache.device), pending.token_ids.shape[0])
            tensors = {"hidden_states": states.cpu().clone(), "token_ids": pending.token_ids.clone()}
            os.makedirs(os.path.dirname(pending.filename), exist_ok=True)
            lock = self._lock_fds.pop(pending.req_id, None)
            if lock is None and self.use_lock:
                lock = os.open(pending.filename + ".lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
                fcntl.flock(lock, fcntl.LOCK_EX)
            done = _Done()
            future = self._executor.submit(self._write_tensors, tensors, done, pending.filename, lock)
            self._req_copy_events[pending.req_id] = done
            self._req_futures[pending.req_id] = future
            future.add_done_callback(partial(self._on_write_done, pending.req_id))

    CpuHiddenStatesConnector.__qualname__ = NAME  # pickled by name: found again through __getattr__
    return CpuHiddenStatesConnector
