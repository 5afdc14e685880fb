"""The suite's time gate judges the change, not the machine (tests/suite_report.py, .ci/times.py): times count in
reference-machine time, time here × the machine's measured speed."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from eval import machine
from tests import suite_report
from tests.conftest import REPO

REFERENCE_WALL_S = 22 * 60  # a suite near its budget on the reference machine


def _reference_run(factor: float = 1.0) -> dict[str, float]:
    """Every file at 1.8× its table time: within its ceiling (2.5×), as a suite a while after its table was taken."""
    return {file: 1.8 * seconds * factor for file, seconds in suite_report.MEASURED_S.items()}


def test_a_machine_measured_slower_may_take_that_much_longer():
    slower = 1.6
    here, wall = _reference_run(slower), REFERENCE_WALL_S * slower  # 35 min of wall time, every file 2.9× its table
    assert suite_report.over_budget(here, wall, suite_report.SUITE_BUDGET_MIN, speed=1 / slower) == []
    raw = suite_report.over_budget(here, wall, suite_report.SUITE_BUDGET_MIN, speed=1.0)
    assert len(raw) == len(here) + 1, "judged in raw time, the same run would fail on every file and the budget"


def test_one_file_that_alone_became_three_times_slower_fails_and_is_named():
    here = _reference_run()
    slow = "tests/eval/test_speculative.py"
    here[slow] = 3 * suite_report.MEASURED_S[slow] * 1.0
    over = suite_report.over_budget(here, REFERENCE_WALL_S, suite_report.SUITE_BUDGET_MIN, speed=1.0)
    assert len(over) == 1 and over[0].startswith(f"{slow}: ") and "past its ceiling" in over[0]
    assert f"({3 * suite_report.MEASURED_S[slow]:.0f} s here)" in over[0]


def test_the_suite_past_its_budget_in_reference_minutes_fails():
    over = suite_report.over_budget({}, 30 * 60, suite_report.SUITE_BUDGET_MIN, speed=0.9)
    assert over == ["this selection: 27.0 reference min (30.0 min here), past its budget of 25 min"]
    assert suite_report.over_budget({}, 30 * 60, None, speed=0.9) == [], "a selection without a budget"


SPEEDS = {0.4: "passes", 1.0: "fails", 0.2: "not judged"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[float, subprocess.CompletedProcess]:
    """Separate pytest runs with the report plugin, a 0.5 s ceiling and one test of 1 s, one on a machine of each
    speed in SPEEDS (given as the measurement an enclosing run took), side by side."""
    started = {speed: _start_pytest(tmp_path_factory.mktemp(f"speed{speed}"), speed) for speed in SPEEDS}
    return {speed: _finished(process) for speed, process in started.items()}


def _start_pytest(root, speed: float) -> subprocess.Popen:
    (root / "conftest.py").write_text(
        textwrap.dedent("""
        pytest_plugins = ["tests.suite_report"]

        def pytest_configure(config):
            from tests import suite_report

            suite_report.DEFAULT_CEILING_S = 0.5
            suite_report._count_engines = lambda session: None  # no engines here (and no vLLM import)
        """)
    )
    (root / "test_sleeps.py").write_text("import time\n\ndef test_sleeps():\n    time.sleep(1.0)\n")
    probe = machine.Measurement("2-core Test CPU, AVX2", "AVX2", 2, 40.0, 300.0, speed, 12.0)
    outputs = ("DRAFTHUB_SUITE_MACHINE", "DRAFTHUB_SUITE_TIMES", "DRAFTHUB_SUITE_ENGINES", "DRAFTHUB_CACHE")
    env = {k: v for k, v in os.environ.items() if k not in outputs}  # none of the enclosing run's files
    env |= {machine.ENV: probe.to_json(), "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", str(root)]
    return subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finished(process: subprocess.Popen) -> subprocess.CompletedProcess:
    out, _ = process.communicate(timeout=180)
    return subprocess.CompletedProcess(process.args, process.returncode, out)


@pytest.mark.parametrize("speed", SPEEDS)
def test_a_run_is_judged_on_its_normalized_times(runs, speed):
    """1 s here is 0.4 reference s on a machine 2.5× slower (within 0.5 s), 1 s on the reference machine (past it);
    at 0.2 the speed is not trusted and the run is not judged, saying what raw time would have failed."""
    run = runs[speed]
    assert (run.returncode == 0) == (SPEEDS[speed] != "fails"), run.stdout[-3000:]
    assert f"speed {speed:.2f}× the reference machine" in run.stdout
    if SPEEDS[speed] == "fails":
        assert "TIME BUDGET EXCEEDED" in run.stdout and "test_sleeps.py: 1 reference s (1 s here)" in run.stdout
    if SPEEDS[speed] == "not judged":
        assert "not judged (speed not trusted), in raw time: " in run.stdout and "TIME BUDGET" not in run.stdout


def _times():
    spec = importlib.util.spec_from_file_location("ci_times", REPO / ".ci" / "times.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "speed, trusted, over",
    [(0.5, True, False), (1.0, True, True), (0.2, False, False)],
)
def test_ci_judges_its_whole_run_without_installs_and_the_build(speed, trusted, over):
    """60 min here, of which 10 installing and 5 building llama.cpp: 45 min judged, 22.5 reference min at 0.5."""
    lines, past = _times().report(3600, 600, 300, 2600, {"speed": speed, "trusted": trusted})
    assert past == over
    assert lines[0].endswith("10 min 0 s") and lines[1].endswith("5 min 0 s")
    if trusted:
        assert f"= {45 * speed:.1f} min of the reference machine" in lines[2]
    else:
        assert "not judged" in lines[2]


def test_ci_without_a_machine_figure_reports_raw_and_passes(tmp_path):
    run = subprocess.run(
        [sys.executable, str(REPO / ".ci" / "times.py"), "100", "10", "0", "80", str(tmp_path / "absent.json")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0 and "not judged: the suite did not measure the machine" in run.stdout
    (tmp_path / "m.json").write_text(json.dumps({"speed": 1.0, "trusted": True}))
    run = subprocess.run(
        [sys.executable, str(REPO / ".ci" / "times.py"), "3000", "10", "0", "2900", str(tmp_path / "m.json")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1 and "PAST its budget of 40 min" in run.stdout
