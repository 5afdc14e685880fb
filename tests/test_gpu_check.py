"""scripts/gpu_check.sh, checked on the CPU (`--device cpu`): where no GPU is lent, this is what keeps it working."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, import_script

SCRIPT = REPO / "scripts" / "gpu_check.sh"


def _run(*args, env=None):
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True, text=True, env=env, timeout=900)


@pytest.mark.slow
def test_the_check_trains_and_evaluates_each_family_and_prints_one_json_line(tmp_path, micro_world):
    # one family here: every family's training on the CPU is the bake-off test's (tests/train/test_bakeoff.py)
    r = _run("--no-install", "--device", "cpu", "--quick", "--recipes", "toy_draft", "--work-dir", tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert result["ok"] is True and result["device"] == "cpu" and result["quick"] is True
    assert list(result["families"]) == ["draft_lm"]
    for kind, family in result["families"].items():
        report = json.loads((tmp_path / family["recipe"] / "eval" / "eval_report.json").read_text())
        assert family["tau"] == round(report["tau"], 4) and family["lossless"] is True, kind
        assert family["engine"] == report["engine"]["path"] and family["peak_gpu_memory_mib"] is None
        low, high = family["speedup_interval"]
        assert low <= high and family["speedup"] == round(report["speedup"], 3)
    # The device-vs-CPU comparison a GPU run makes: the same export measured again by python -m eval on the
    # CPU in fp32 gives the same τ (here both sides are the CPU, so exactly).
    _cpu_tau = import_script("gpu_check")._cpu_tau
    run_dir = tmp_path / "toy_draft"
    report = json.loads((run_dir / "eval" / "eval_report.json").read_text())
    assert _cpu_tau(run_dir, report) == report["tau"]


def test_the_check_refuses_what_it_cannot_run_in_one_line(tmp_path):
    r = _run()
    assert r.returncode == 2 and r.stderr.strip() == (
        "error: start with --wheels DIR, --no-install or --make-wheels DIR (see --help)"
    )
    r = _run("--wheels", tmp_path / "none")
    assert r.returncode == 2 and r.stderr.strip() == (
        f"error: --wheels {tmp_path / 'none'} is not a directory; make one with --make-wheels"
    )
    r = _run("--no-install", "--device", "cuda")  # this machine has no GPU
    assert r.returncode == 2 and "sees no CUDA device; install a CUDA build of torch or pass --device cpu" in r.stderr
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    r = _run("--no-install", env={"PYTHON": str(fake)})
    assert r.returncode == 2 and "torch is not installed" in r.stderr


def test_the_cpu_remeasure_reads_the_prompts_the_pipeline_measured():
    # the main job measures named sets (MT-Bench + HumanEval), not the toy world's file: the CPU re-measure must
    # decode the same ones, and a held-out slice (drawn inside its run) is refused rather than replaced
    _prompt_args = import_script("gpu_check")._prompt_args
    named = {"source": "mt_bench+humaneval", "split": None, "held_out_slice": False, "what": "x", "column": None}
    assert _prompt_args({"prompts": named, "target": "package:x"}) == ["prompts=mt_bench+humaneval"]
    split = {**named, "source": "/d/prompts", "split": "test", "column": "question"}
    assert _prompt_args({"prompts": split}) == ["prompts=/d/prompts", "split=test", "prompts_column=question"]
    sliced = {**named, "source": "/d/p.jsonl", "held_out_slice": True, "what": "the 64 prompts of /d/p.jsonl"}
    with pytest.raises(SystemExit, match="the 64 prompts of /d/p.jsonl cannot be measured again"):
        _prompt_args({"prompts": sliced})
