"""vLLM and llama.cpp tests run for real where the engine is installed (CI installs vLLM's CPU build and builds
llama.cpp with scripts/build_llamacpp.py) and skip, saying why, elsewhere."""

import pytest

from eval.serving.llamacpp import missing_reason as llamacpp_missing_reason
from eval.serving.vllm import missing_reason as vllm_missing_reason

WHY_CI = {"needs_vllm": "CI installs it and runs these for real", "needs_llamacpp": "CI builds it and runs these"}


def pytest_collection_modifyitems(config, items):
    reasons = {"needs_vllm": vllm_missing_reason(), "needs_llamacpp": llamacpp_missing_reason()}
    for item in items:
        for marker, reason in reasons.items():
            if reason is not None and marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=f"{reason} — {WHY_CI[marker]}"))
