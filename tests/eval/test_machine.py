"""eval/machine.py: the machine's speed against the reference machine, which every time budget and benchmark quotes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from eval import machine
from tests.conftest import REPO


def _measurement(speed: float) -> machine.Measurement:
    return machine.Measurement(
        machine="2-core Test CPU, AVX2",
        cpu_class="AVX2",
        threads=2,
        matmul_gflops=40.0,
        decode_tok_s=300.0,
        speed=speed,
        seconds=12.0,
    )


@pytest.mark.parametrize(
    "flags, expected",
    [
        ({"avx", "avx2", "fma"}, "AVX2"),
        ({"avx2", "avx512f", "avx512bw"}, "AVX-512"),
        ({"avx2", "avx512f", "avx512_bf16"}, "AVX-512 with BF16"),
        ({"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}, "AMX"),
        ({"sse4_2"}, "no AVX2"),
        ({"fp", "asimd"}, "Arm NEON"),
    ],
)
def test_the_class_is_what_the_matrix_kernels_can_use(flags, expected):
    assert machine.cpu_class(flags) == expected


def test_a_measurement_compares_both_rates_with_the_reference_machines(monkeypatch):
    ref = machine.REFERENCE
    assert ref.matmul_gflops > 0 and ref.decode_tok_s > 0 and ref.smollm2_tok_s > 0, "the reference is recorded"
    # a machine at half the reference's matmul rate and twice its decode rate is, on the geometric mean, as fast
    assert machine.speed_of(ref.matmul_gflops / 2, ref.decode_tok_s * 2) == pytest.approx(1.0)
    assert machine.speed_of(ref.matmul_gflops / 1.6, ref.decode_tok_s / 1.6) == pytest.approx(1 / 1.6)
    monkeypatch.delenv(machine.ENV, raising=False)
    found = machine.measure(rounds=1)
    assert found.matmul_gflops > 0 and found.decode_tok_s > 0 and found.threads >= 1
    assert found.speed == pytest.approx(machine.speed_of(found.matmul_gflops, found.decode_tok_s), rel=1e-2)
    assert found.cpu_class in found.machine


def test_a_speed_outside_the_trusted_range_is_said_and_not_trusted():
    assert _measurement(1.0).trusted and _measurement(0.3).trusted and _measurement(3.0).trusted
    slow, fast = _measurement(0.2), _measurement(4.0)
    assert not slow.trusted and not fast.trusted
    assert "not trusted" in slow.line() and "not trusted" not in _measurement(0.6).line()
    line = _measurement(0.6).line()
    assert "speed 0.60× the reference machine" in line and machine.REFERENCE.name in line and "AVX2" in line
    assert _measurement(0.6).reference_seconds(100.0) == pytest.approx(60.0)


def test_a_run_measures_once_and_the_programs_it_starts_inherit_it(monkeypatch):
    taken = _measurement(0.7)
    monkeypatch.setenv(machine.ENV, taken.to_json())
    assert machine.current() == taken  # no new measurement: the enclosing run's
    assert json.loads(taken.to_json())["trusted"] is True
    line = machine.with_machine({"bench": "x"})
    assert line["bench"] == "x" and line["machine"]["speed"] == 0.7
    assert line["machine"]["reference"]["name"] == machine.REFERENCE.name
    out = subprocess.run(
        [sys.executable, "-m", "eval.machine"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0] == taken.line() and machine.Measurement.from_json(out[1]) == taken


def test_a_run_measured_at_both_ends_is_judged_by_the_slower():
    first, last = _measurement(1.44), _measurement(1.0)
    assert machine.slower(first, last) is last and machine.slower(last, first) is last
