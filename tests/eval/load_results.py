"""Load-generator results as `vllm bench serve` returns them, and the load section they give, for the tests of
serving under load and of the places that show it (card, registry, bake-off)."""

from eval.serving.load_figures import break_even, level_figures


def _result(tokens: list[int], ttfts: list[float], latencies: list[float], duration: float, **spec) -> dict:
    """A `vllm bench serve` result, its per-request lists included (--save-detailed)."""
    return {
        "output_lens": tokens,
        "ttfts": ttfts,
        "latencies": latencies,
        "total_output_tokens": sum(tokens),
        "duration": duration,
        "completed": len(tokens),
        "failed": 0,
        **spec,
    }


SPEC = _result([11, 11], [0.1, 0.1], [0.6, 1.1], 1.0, spec_decode_num_drafts=4, spec_decode_accepted_tokens=6,
               spec_decode_per_position_acceptance_rates=[0.75, 0.5, 0.25])  # fmt: skip
BASE = _result([11, 11], [0.1, 0.1], [1.1, 2.1], 2.0)


LOAD = {
    "engine": "vllm", "engine_version": "0.32.0", "load_generator": "vllm bench serve 0.32.0",
    "server": "vllm serve (started by drafthub)", "num_speculative_tokens": 3, "concurrency": [1, 4],
    "repeats": 2, "max_new_tokens": 64, "temperature": 0.0, "prompts": 32,
    "levels": [
        {**level_figures(1, [SPEC], [BASE]), "concurrency": 1},
        {**level_figures(4, [BASE], [SPEC]), "concurrency": 4, "pays": False},
    ],
}  # fmt: skip
LOAD["break_even"] = break_even(LOAD["levels"])
