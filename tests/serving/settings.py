"""The eval settings the served-check tests share."""

from eval.config import EvalConfig, VLLMServeConfig

# Greedy chains of γ = 3 on 6 prompts; acceptance only: the served speed-up (a second engine) is tested once,
# in test_pipeline_serve.py.
SERVED = EvalConfig(
    num_prompts=6,
    max_new_tokens=24,
    num_speculative_tokens=3,
    gamma_sweep=[],
    warmup_prompts=0,
    serve="vllm",
    vllm=VLLMServeConfig(speed_repeats=0),
)
