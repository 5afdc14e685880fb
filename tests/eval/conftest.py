"""Fixtures shared by the engine tests."""

import pytest

from eval.sampling import SamplingParams
from eval.speculative import autoregressive_generate


@pytest.fixture(scope="module")
def greedy_reference(target, tokenizer, prompt_ids):
    """The target's own greedy continuations (our KV-cached decoding), 40 tokens per prompt."""
    return autoregressive_generate(
        target, prompt_ids, 40, SamplingParams(), eos_ids={tokenizer.eos_token_id}, vocab_size=len(tokenizer)
    )
