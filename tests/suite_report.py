"""The suite's own report, printed at the end of every run: time per test directory and per file, and how many
serving engines the run started (vLLM engines, `vllm serve`, llama-server), so a slow or engine-hungry change shows
in the run that made it. Registered by tests/conftest.py; pytest's own `--durations` lists the slowest tests.

A vLLM engine is counted where it is built (`vllm.LLM`, wrapped when the run selects a vLLM test), a server where
eval/serving/process.py starts it."""

from __future__ import annotations

import collections
import importlib.util
import time
from pathlib import Path

import pytest

ENGINE_STARTS: collections.Counter = collections.Counter()
_FILE_SECONDS: collections.Counter = collections.Counter()
_SESSION: dict = {}


def _count_vllm_engines() -> None:
    """vllm.LLM → the same class, counted: every engine drafthub builds comes through `from vllm import LLM`."""
    import vllm

    real = vllm.LLM

    class CountedLLM(real):
        def __init__(self, *args, **kwargs):
            ENGINE_STARTS["vLLM engine (LLM)"] += 1
            super().__init__(*args, **kwargs)

    CountedLLM.__name__ = CountedLLM.__qualname__ = "LLM"
    vllm.LLM = CountedLLM


def _count_servers() -> None:
    from eval.serving import process

    real = process._started

    def counted(argv, *, name, **kwargs):
        ENGINE_STARTS["llama-server" if name.startswith("llama-server") else "vllm serve"] += 1
        return real(argv, name=name, **kwargs)

    process._started = counted


def pytest_collection_finish(session) -> None:
    _SESSION["start"] = time.monotonic()
    _count_servers()
    if importlib.util.find_spec("vllm") and any(item.get_closest_marker("needs_vllm") for item in session.items):
        _count_vllm_engines()


def pytest_runtest_logreport(report) -> None:
    _FILE_SECONDS[report.nodeid.split("::")[0]] += report.duration  # setup + call + teardown


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:5.1f} min"


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter) -> None:
    if not _FILE_SECONDS:
        return
    write = terminalreporter.write_line
    total = sum(_FILE_SECONDS.values())
    by_dir = collections.Counter()
    for file, seconds in _FILE_SECONDS.items():
        by_dir[str(Path(file).parent)] += seconds
    terminalreporter.section("time per test directory")
    for directory, seconds in by_dir.most_common():
        write(f"{_minutes(seconds)}  {directory}/")
    write(f"{_minutes(total)}  in all (wall {_minutes(time.monotonic() - _SESSION.get('start', time.monotonic()))})")
    terminalreporter.section("slowest test files")
    for file, seconds in _FILE_SECONDS.most_common(15):
        write(f"{seconds:7.1f} s  {file}")
    starts = ", ".join(f"{n} × {kind}" for kind, n in sorted(ENGINE_STARTS.items())) or "none"
    terminalreporter.section("serving engines started")
    write(f"{sum(ENGINE_STARTS.values())} in all: {starts}")
