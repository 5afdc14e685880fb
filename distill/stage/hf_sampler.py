"""The transformers sampling backend: batched, left-padded `generate` of the target's answers."""

from __future__ import annotations

import torch

from distill.targets.load import eos_token_ids, padding_id

# Sampling settings at their no-op values, so that a target's generation_config cannot add to data.sampling.
NEUTRAL = {
    "top_k": 0,
    "min_p": 0.0,
    "typical_p": 1.0,
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
}


class HFSampler:
    """Answers prompts with the target's own `generate` (temperature / top-p / length cap)."""

    def __init__(self, model, tokenizer, temperature: float, top_p: float, max_new_tokens: int, batch_size: int):
        self.model, self.tokenizer = model, tokenizer
        self.temperature, self.top_p = temperature, top_p
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.eos_ids = eos_token_ids(model, tokenizer)

    @torch.no_grad()
    def sample(self, prompts: list[list[int]], seed: int) -> list[tuple[list[int], str]]:
        """Return (completion ids, finish reason) per prompt; the end-of-turn token is kept."""
        torch.manual_seed(seed)  # generate draws from the global generator
        out = []
        for i in range(0, len(prompts), self.batch_size):
            out.extend(self._sample_batch(prompts[i : i + self.batch_size]))
        return out

    def _sample_batch(self, prompts: list[list[int]]) -> list[tuple[list[int], str]]:
        pad = padding_id(self.tokenizer, self.eos_ids)
        width = max(map(len, prompts))
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])  # (B, T) left padded
        attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        greedy = self.temperature <= 0
        generated = self.model.generate(
            input_ids=input_ids.to(self.model.device),
            attention_mask=attention_mask.to(self.model.device),
            do_sample=not greedy,
            temperature=None if greedy else self.temperature,
            top_p=None if greedy else self.top_p,
            # the model's generation_config fills every setting left None: Qwen2.5 ships repetition_penalty 1.05 and
            # top_k 20, which would answer with another distribution than data.sampling (and the vLLM backend) says
            **NEUTRAL,
            max_new_tokens=self.max_new_tokens,
            pad_token_id=pad,
            eos_token_id=sorted(self.eos_ids),
        )[:, width:].tolist()  # host sync: once per batch
        return [self._trim(row) for row in generated]

    def close(self) -> None:
        """Drop the target, so its memory is free before training starts."""
        self.model = None

    def _trim(self, row: list[int]) -> tuple[list[int], str]:
        for j, tok in enumerate(row):
            if tok in self.eos_ids:
                return row[: j + 1], "stop"
        return row, "length"
