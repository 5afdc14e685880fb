"""vLLM tests run for real where vLLM is installed (CI installs the CPU build) and skip, saying why, elsewhere."""

import pytest

from eval.serving.vllm import missing_reason as vllm_missing_reason


def pytest_collection_modifyitems(config, items):
    reason = vllm_missing_reason()
    if reason is None:
        return
    for item in items:
        if "needs_vllm" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=f"{reason} — CI installs it and runs these for real"))
