"""The edit loop runs as on a bare `pip install -e ".[test]"` (tests/engines_absent.py): here, and in the Python
processes a test starts."""

import importlib.util
import subprocess
import sys

import pytest


def test_an_edit_loop_test_sees_no_optional_engine_nor_do_the_processes_it_starts():
    assert importlib.util.find_spec("vllm") is None and importlib.util.find_spec("deepspeed") is None
    with pytest.raises(ModuleNotFoundError):
        import vllm  # noqa: F401
    from heads.formats import llamacpp

    assert llamacpp.programs.missing() is not None
    probe = (
        "import importlib.util as u; print(u.find_spec('vllm'), u.find_spec('speculators'), bool(u.find_spec('torch')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["None", "None", "True"]


@pytest.mark.needs_vllm
def test_the_slow_tier_sees_what_is_installed():
    """Hidden for the edit loop only: where vLLM is installed (CI), the slow tier finds and imports it."""
    assert importlib.util.find_spec("vllm") is not None
    import vllm  # noqa: F401
