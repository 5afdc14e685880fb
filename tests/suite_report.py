"""The suite's own report and its time budget, checked after every run.

Printed: time per test directory and per file, the caches the run reused or built, and the serving engines it
started (vLLM engines, `vllm serve`, llama-server), so a slow or engine-hungry change shows in the run that made it.
pytest's own `--durations` (pyproject.toml) lists the slowest tests. Registered by tests/conftest.py; works alike
in one process and under pytest-xdist (each test's engine starts travel with its report).

Enforced, in reference-machine time: a time taken here counts as time × speed, where speed is this machine's measured
against the reference machine's (eval/machine.py: a fixed ~13 s workload, run before the first test of a judged
run and printed as one line). A test file past its ceiling fails the run, naming the file, and so does the whole
suite past SUITE_BUDGET_MIN or the quick tier (`-m "not slow"`) past QUICK_BUDGET_MIN. So a run fails on time when
the change made it slower, never because the machine is: a machine measured 1.6× slower may take 1.6× as long. The
speed is measured again after the last test, and the slower of the two judges (a VM's speed drifts). A
failing run is what CI keeps and the next change sees at once; a warning in a passing run would be read by no one. A
file's ceiling is 2.5× its time in MEASURED_S, measured on the reference machine (eval.machine.REFERENCE), and at
least DEFAULT_CEILING_S: a new file that takes longer than that enters the table, with its time.

Which runs measure the machine: the whole suite and the quick tier, at their start (before xdist's workers, which
inherit the figure); any other selection, after its tests, only if one of its files took a third of its ceiling (all
of it on the fastest machine the gate trusts).
A speed outside eval.machine.TRUSTED (0.3–3×) is reported and not trusted: the run is then not judged on time, and
the summary says what it would have failed on.

The same table orders the run: the slowest files start first, so the two xdist workers finish together.

A vLLM engine is counted where it is built (tests/vllm_host.py's helpers, or `vllm.LLM` where they are not used),
a server where eval/serving/process.py starts it.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import time
from pathlib import Path

import pytest

from eval import machine

# Every budget and ceiling is in reference-machine time: minutes or seconds of eval.machine.REFERENCE.
REFERENCE = machine.REFERENCE  # the machine MEASURED_S was measured on, with its figures
SUITE_BUDGET_MIN = 25  # the README's test command
QUICK_BUDGET_MIN = 8  # python -m pytest -m "not slow": the edit loop
DEFAULT_CEILING_S = 40
CEILING_FACTOR = 2.5
# Test file → seconds (setup, calls and teardown; pytest -n 2), on the reference machine (2026-12-02: its two runs).
MEASURED_S = {  # the larger of a cold-cache run (toy world, inductor cache, SmolLM2 built) and a warm one
    "tests/test_main_job.py": 397,  # SmolLM2: a fresh interpreter (first fetch, dequantizing), suffix, ngram, bake-off
    "tests/train/test_multiprocess.py": 365,
    "tests/test_real_recipes.py": 270,
    "tests/serving/test_llamacpp.py": 246,
    "tests/eval/test_static_engine.py": 230,  # torch.compile, cold inductor cache
    "tests/serving/test_pipeline_serve.py": 157,
    "tests/serving/test_served_check.py": 152,
    "tests/train/test_bakeoff.py": 70,
    "tests/test_families.py": 58,
    "tests/test_adding_a_family.py": 53,
    "tests/serving/test_vllm_features.py": 51,
    "tests/test_cli.py": 46,
    "tests/eval/test_speculative.py": 45,
    "tests/eval/test_dspark_dflash2_decoding.py": 40,
    "tests/eval/test_eagle_decoding.py": 40,
    "tests/test_gpu_check.py": 37,
    "tests/test_first_run.py": 36,
    "tests/test_bad_inputs.py": 33,
    "tests/test_acceptance_regression.py": 32,
    "tests/train/test_planner.py": 30,
    "tests/serving/test_speculators_interop.py": 29,
    "tests/distill/test_split_distillation.py": 29,
    "tests/eval/test_medusa_decoding.py": 27,
    "tests/eval/test_ngram.py": 25,
    "tests/serving/test_llamacpp_gguf_target.py": 25,
    "tests/serving/test_served_dflash.py": 24,
    "tests/train/test_configs.py": 23,
    "tests/test_sweep_copy.py": 20,
    "tests/eval/test_verify.py": 18,
    "tests/test_interrupts.py": 18,
    "tests/eval/test_peagle_decoding.py": 18,
    "tests/serving/test_vllm_backend.py": 18,
    "tests/eval/test_dflash_decoding.py": 17,
    "tests/eval/test_serving_load.py": 16,
}


def ceiling(file: str) -> float:
    return max(DEFAULT_CEILING_S, CEILING_FACTOR * MEASURED_S.get(file, 0))


ENGINES = ("vLLM engine (in a test helper)", "vLLM engine (own processes)", "vllm serve", "llama-server")

_PENDING: list = []  # what the current test started, sent with its report
_EVENTS: collections.Counter = collections.Counter()  # engine kind (and helper event) → count
_EVENTS_BY_FILE: collections.Counter = collections.Counter()
_RECORDS: list = []  # $DRAFTHUB_SUITE_ENGINES names a JSON file to write them to
_FILE_SECONDS: collections.Counter = collections.Counter()  # $DRAFTHUB_SUITE_TIMES: a JSON file for MEASURED_S
_SESSION: dict = {"over": []}


def record_start(engine: str, what) -> None:
    """One engine or server (or a vLLM test helper event) started by the current test."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    _PENDING.append({"test": test, "engine": engine, "what": what})


def _counted(cls, engine: str):
    """vllm.LLM with every engine it builds counted."""

    class Counted(cls):
        def __init__(self, *args, **kwargs):
            record_start(engine, {k: str(v) for k, v in kwargs.items()})
            super().__init__(*args, **kwargs)

    Counted.__name__ = Counted.__qualname__ = "LLM"
    return Counted


def _count_engines(session) -> None:
    from eval.serving import process

    real = process._launched

    def counted(argv, *, name, **kwargs):
        command = argv(0)
        if Path(command[0]).name == "llama-server":
            record_start("llama-server", command)
        elif "vllm.entrypoints.openai.api_server" in command:
            record_start("vllm serve", command)  # (the process tests' stand-in servers are no engines)
        return real(argv, name=name, **kwargs)

    process._launched = counted
    from tests import vllm_host

    needs_vllm = any(item.get_closest_marker("needs_vllm") for item in session.items)
    if vllm_host.POOL is not None:  # the helpers count the engines they build (not the ones they hand on)
        vllm_host.REAL_LLM = _counted(vllm_host.REAL_LLM, "vLLM engine (own processes)")
    elif needs_vllm and importlib.util.find_spec("vllm"):
        import vllm

        vllm.LLM = _counted(vllm.LLM, "vLLM engine (own processes)")


@pytest.hookimpl(tryfirst=True)  # before xdist starts its workers: a quiet machine, and they inherit the figure
def pytest_sessionstart(session) -> None:
    controller = not hasattr(session.config, "workerinput")
    if controller and _budget(session.config) is not None:
        _SESSION["inherited"] = machine.inherited() is not None  # an enclosing run's: it measures the end too
        _SESSION["machine"] = _SESSION["first"] = machine.current()
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(_SESSION["machine"].line())
    _SESSION["start"], _SESSION["started_at"] = time.monotonic(), time.time()


def pytest_collection_modifyitems(config, items) -> None:
    """The slowest files first, each file's tests in their own order (the same order on every xdist worker)."""
    rank = {file: i for i, file in enumerate(sorted(MEASURED_S, key=MEASURED_S.get, reverse=True))}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


def pytest_collection_finish(session) -> None:
    _count_engines(session)  # where tests run: in the one process, or in each xdist worker


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if _PENDING:
        report.user_properties.append(("engine_starts", list(_PENDING)))
        _PENDING.clear()


def pytest_runtest_logreport(report) -> None:
    """On the process that reports (the controller under xdist): time and engine starts per file."""
    file = report.nodeid.split("::")[0]
    _FILE_SECONDS[file] += report.duration  # setup + call + teardown
    for name, records in report.user_properties:
        if name == "engine_starts":
            for record in records:
                _EVENTS[record["engine"]] += 1
                _EVENTS_BY_FILE[file] += record["engine"] in ENGINES
                _RECORDS.append(record)


def _budget(config) -> float | None:
    """The wall-time budget (minutes) of this run's selection: the whole suite or the quick tier, else none."""
    tests = Path(__file__).resolve().parent
    if config.option.keyword or any(Path(a).resolve() != tests for a in config.args):
        return None
    return {"": SUITE_BUDGET_MIN, "not slow": QUICK_BUDGET_MIN}.get(config.option.markexpr.strip())


def over_budget(file_seconds: dict[str, float], wall: float, budget_min: float | None, speed: float) -> list[str]:
    """What is past its budget once normalized: each test file whose time × speed (reference seconds) is past its
    ceiling, and the selection whose wall time × speed is past its budget. Each line gives both times."""
    over = [
        f"{file}: {seconds * speed:.0f} reference s ({seconds:.0f} s here), past its ceiling of {ceiling(file):.0f} s"
        for file, seconds in sorted(file_seconds.items(), key=lambda kv: -kv[1])
        if seconds * speed > ceiling(file)
    ]
    if budget_min is not None and wall * speed > budget_min * 60:
        over.append(
            f"this selection: {wall * speed / 60:.1f} reference min ({wall / 60:.1f} min here), "
            f"past its budget of {budget_min} min"
        )
    return over


def _could_be_over(file_seconds: dict[str, float]) -> bool:
    """Whether a file took long enough to be past its ceiling on the fastest machine a gate trusts."""
    return any(seconds * machine.TRUSTED[1] > ceiling(file) for file, seconds in file_seconds.items())


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session) -> None:
    if hasattr(session.config, "workerinput") or not _FILE_SECONDS:
        return  # an xdist worker: the controller judges
    budget, wall = _budget(session.config), time.monotonic() - _SESSION.get("start", time.monotonic())
    _SESSION["wall"] = wall
    if "first" in _SESSION and not _SESSION["inherited"]:  # the speed drifts: measured at both ends of the run
        _SESSION["last"] = machine.measure()
        _SESSION["machine"] = machine.slower(_SESSION["first"], _SESSION["last"])
    elif "machine" not in _SESSION and _could_be_over(_FILE_SECONDS):
        _SESSION["machine"] = machine.current()  # a selection without a budget: measured only when it matters
    probe = _SESSION.get("machine")
    if probe is None:
        return
    if os.environ.get("DRAFTHUB_SUITE_MACHINE"):
        Path(os.environ["DRAFTHUB_SUITE_MACHINE"]).write_text(probe.to_json())
    if not probe.trusted:  # not judged: what raw times would have failed, for the summary
        _SESSION["untrusted"] = over_budget(_FILE_SECONDS, wall, budget, 1.0)
        return
    _SESSION["over"] = over_budget(_FILE_SECONDS, wall, budget, probe.speed)
    if _SESSION["over"] and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:5.1f} min"


def _micro_world_line():
    """Whether this run built the micro toy world or found it in $DRAFTHUB_CACHE (None if no test loaded it)."""
    if not os.environ.get("DRAFTHUB_CACHE"):
        return None
    from distill.toyworld import build

    world = build.built_world("micro")
    if world is None:
        return None
    built_now = (world.root / "world.json").stat().st_mtime >= _SESSION.get("started_at", 0)
    how = f"built in {world.info.get('build_seconds', 0):.0f} s" if built_now else "reused"
    return f"micro toy world: {how} ({world.root})"


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter) -> None:
    if not _FILE_SECONDS:
        return
    write = terminalreporter.write_line
    by_dir = collections.Counter()
    for file, seconds in _FILE_SECONDS.items():
        by_dir[str(Path(file).parent)] += seconds
    terminalreporter.section("time per test directory")
    for directory, seconds in by_dir.most_common():
        write(f"{_minutes(seconds)}  {directory}/")
    wall = _SESSION.get("wall") or time.monotonic() - _SESSION.get("start", time.monotonic())
    write(f"{_minutes(sum(_FILE_SECONDS.values()))}  in all, test by test (wall {_minutes(wall)})")
    probe = _SESSION.get("machine")
    speed = probe.speed if probe is not None else None
    terminalreporter.section("slowest test files")
    for file, seconds in _FILE_SECONDS.most_common(15):
        normalized = f"{seconds * speed:7.1f} ref s of {ceiling(file):4.0f}  " if speed is not None else ""
        write(f"{seconds:7.1f} s  {normalized}{file}")
    if probe is not None:
        terminalreporter.section("time on the reference machine")
        write(probe.line())
        if "last" in _SESSION:
            ends = f"{_SESSION['first'].speed:.2f}× at the start, {_SESSION['last'].speed:.2f}× at the end"
            write(f"(the slower of the speeds at both ends of the run: {ends})")
        budget = _budget(terminalreporter.config)
        judged = f" (budget {budget} min)" if budget is not None else ""
        write(f"wall {wall / 60:.1f} min here = {wall * probe.speed / 60:.1f} reference min{judged}")
        for line in _SESSION.get("untrusted", ()):
            write(f"not judged (speed not trusted), in raw time: {line}", yellow=True)
    world = _micro_world_line()
    if world:
        terminalreporter.section("caches")
        write(world)
    terminalreporter.section("serving engines started")
    starts = ", ".join(f"{_EVENTS[kind]} × {kind}" for kind in ENGINES if _EVENTS[kind]) or "none"
    write(f"{sum(_EVENTS[kind] for kind in ENGINES)} in all: {starts}")
    helpers = {kind: n for kind, n in _EVENTS.items() if kind not in ENGINES}
    if helpers:
        write("tests/vllm_host.py: " + ", ".join(f"{n} × {kind}" for kind, n in sorted(helpers.items())))
    for file, n in _EVENTS_BY_FILE.most_common():
        write(f"{n:4d}  {file}")
    if os.environ.get("DRAFTHUB_SUITE_ENGINES"):
        Path(os.environ["DRAFTHUB_SUITE_ENGINES"]).write_text(json.dumps(_RECORDS, indent=1))
    if os.environ.get("DRAFTHUB_SUITE_TIMES"):
        times = {file: round(seconds, 1) for file, seconds in _FILE_SECONDS.most_common()}
        Path(os.environ["DRAFTHUB_SUITE_TIMES"]).write_text(json.dumps(times, indent=1))
    if _SESSION["over"]:
        terminalreporter.section("TIME BUDGET EXCEEDED", red=True, bold=True)
        for line in _SESSION["over"]:
            terminalreporter.write_line(line, red=True, bold=True)
        write("Make it faster, move tests to the slow tier, or raise a ceiling saying why (tests/suite_report.py).")
