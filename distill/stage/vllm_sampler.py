"""The vLLM sampling backend (data.backend=vllm): the target answers at serving speed.

Same contract as the transformers backend (`HFSampler.sample`): the chat-templated prompt ids
go in as they are (no second templating or tokenization), answers come back as token ids with
the end-of-turn token kept and a finish reason, so shards, loss masks and the manifest are
identical. Each prompt carries its own seed (shard seed + position), so a resumed run draws the
same answers whatever the batching. vLLM is imported only here.
"""

from __future__ import annotations

import gc
from typing import Optional

from distill.config import TargetConfig
from distill.errors import DistillError


class VLLMSampler:
    """Answers prompts with vLLM's `LLM.generate` on token prompts."""

    def __init__(
        self,
        model_path: str,
        target: TargetConfig,
        eos_ids: set[int],
        *,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        max_model_len: int,
        tensor_parallel_size: int = 1,
        memory_fraction: Optional[float] = None,
    ):
        import torch
        from vllm import LLM

        on_gpu = torch.cuda.is_available()
        self.eos_ids = eos_ids
        self.temperature, self.top_p, self.max_new_tokens = temperature, top_p, max_new_tokens
        self.llm = LLM(
            model=model_path,
            revision=target.revision,
            dtype=target.dtype,  # drafthub's names (float32, bfloat16, float16, auto) are vLLM's
            trust_remote_code=target.trust_remote_code,
            tensor_parallel_size=tensor_parallel_size,
            # the CPU build reserves this share of RAM
            gpu_memory_utilization=memory_fraction or (0.9 if on_gpu else 0.2),
            enforce_eager=not on_gpu,  # compiling for CPU costs more than a distillation batch
            max_model_len=max_model_len,
            seed=0,
        )

    def sample(self, prompts: list[list[int]], seed: int) -> list[tuple[list[int], str]]:
        """Return (completion ids, finish reason) per prompt; the end-of-turn token is kept."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        greedy = self.temperature <= 0
        params = [
            SamplingParams(
                temperature=0.0 if greedy else self.temperature,
                top_p=1.0 if greedy else self.top_p,
                max_tokens=self.max_new_tokens,
                stop_token_ids=sorted(self.eos_ids),
                seed=seed + i,
                detokenize=False,
            )
            for i in range(len(prompts))
        ]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        return [self._answer(o.outputs[0]) for o in outs]

    def _answer(self, completion) -> tuple[list[int], str]:
        ids = list(completion.token_ids)
        if completion.finish_reason == "stop" and (not ids or ids[-1] not in self.eos_ids):
            raise DistillError(
                "vLLM stopped an answer without its end token; this vLLM version drops stop tokens, "
                "which the loss masks need — use data.backend=hf or another vLLM version"
            )
        return ids, "stop" if completion.finish_reason == "stop" else "length"

    def close(self) -> None:
        """Stop vLLM's engine processes and free their memory before training starts."""
        self.llm.llm_engine.engine_core.shutdown()
        del self.llm
        gc.collect()
