"""Data-parallel training through `accelerate launch` on CPU: 2 processes train as 1 does.

The global batch is fixed (trainer.batch_size), each process takes half of it, and each
process's loss is weighted by its share of the batch's loss positions, so the 2-process run
computes the same gradients as 1 process up to float32 summation order: logged losses agree to
1e-5 relative, weights to 1e-5 absolute (measured ~1e-6). max_seq_len=160 cuts some answers
short, so the halves hold different numbers of answer tokens (sometimes none): averaging the
halves' mean losses unweighted misses the reference by up to 2× here, so the bound can fail.
"""

import json
import os
import shutil
import subprocess
import sys
from importlib.util import find_spec

import pytest
from safetensors.torch import load_file

from tests.conftest import REPO

pytestmark = pytest.mark.slow

TRAIN = [
    "recipe=toy",
    "target=micro",
    "data.max_prompts=24",
    "data.sampling.max_new_tokens=24",
    "trainer.max_steps=8",
    "trainer.batch_size=8",
    "trainer.save_every=4",
    "trainer.warmup_steps=2",
    "trainer.log_every=1",
    "trainer.lr=1e-2",
    "trainer.max_seq_len=160",
    "trainer.max_cut_share=1",  # the cut is the point (see above), accepted explicitly
]
CPU_DDP = [
    "--multi_gpu",
    "--num_processes",
    "2",
    "--num_machines",
    "1",
    "--mixed_precision",
    "no",
    "--dynamo_backend",
    "no",
]


def _env(deepspeed: bool = False):
    """ACCELERATE_USE_CPU makes DDP start its 2 processes on CPUs, but it would also turn a DeepSpeed launch into
    plain DDP (accelerate then ignores the DeepSpeed config): DeepSpeed finds the CPU by itself."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1"}
    if deepspeed:
        del env["ACCELERATE_USE_CPU"]
    return env


def _assert_succeeded(r):
    """rc 0, else the error lines of every process first (the launcher's own tail hides them)."""
    errors = [line for line in r.stderr.splitlines() if "Error" in line or line.startswith("error")]
    assert r.returncode == 0, "\n".join(errors[:20]) + "\n" + r.stderr[-2000:]


def _train(run_dir, *launch, stages="[train]", overrides=()):
    """`python -m train` (launch empty) or `accelerate launch LAUNCH -m train`, training stage only by default."""
    args = [
        *TRAIN,
        *overrides,
        f"stages={stages}",
        f"run_dir={run_dir}",
        "eval.num_prompts=2",
        "eval.max_new_tokens=8",
        "eval.gamma_sweep=[1]",
    ]
    cmd = (
        [sys.executable, "-m", "accelerate.commands.launch", *launch, "--main_process_port", "0", "-m", "train", *args]
        if launch
        else [sys.executable, "-m", "train", *args]
    )
    deepspeed = any("zero" in arg for arg in launch)  # conf/accelerate/zero{2,3}.yaml
    r = subprocess.run(cmd, cwd=REPO, env=_env(deepspeed), capture_output=True, text=True, timeout=900)
    _assert_succeeded(r)
    return r


def _losses(run_dir):
    return [json.loads(line)["loss"] for line in (run_dir / "checkpoints" / "log.jsonl").read_text().splitlines()]


def _weights(run_dir):
    return load_file(str(run_dir / "checkpoints" / "final" / "model.safetensors"))


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, micro_world):
    """The reference: distil once, train with 1 process; later runs copy its data."""
    root = tmp_path_factory.mktemp("one")
    r = subprocess.run(
        [sys.executable, "-m", "train", *TRAIN, "stages=[distill,train]", f"run_dir={root}"],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    _assert_succeeded(r)
    return root


def _with_data(tmp_path, reference, name="run"):
    run = tmp_path / name
    run.mkdir()
    shutil.copytree(reference / "data", run / "data")
    return run


def _assert_same_training(run, reference):
    ours, theirs = _losses(run), _losses(reference)
    assert len(ours) == len(theirs) == 8
    assert ours == pytest.approx(theirs, rel=1e-5)
    a, b = _weights(run), _weights(reference)
    assert a.keys() == b.keys()
    for k in a:
        assert (a[k].double() - b[k].double()).abs().max() < 1e-5, k  # .double(): EAGLE-3 keeps a bool vocab map


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory, one_process):
    """The same training by 2 DDP processes, evaluated by the main one: launched once for the tests below."""
    run = _with_data(tmp_path_factory.mktemp("two"), one_process)
    _train(run, *CPU_DDP, stages="[train,eval]")
    return run


def test_two_ddp_processes_train_like_one(two_processes, one_process):
    run = two_processes
    _assert_same_training(run, one_process)
    assert json.loads((run / "checkpoints" / "final" / "train_summary.json").read_text())["processes"] == 2
    # the main process alone evaluates, after the others have left
    assert json.loads((run / "eval" / "eval_report.json").read_text())["lossless"] is True


def test_checkpoint_saved_by_two_processes_resumes_on_one(tmp_path, two_processes, one_process):
    run = tmp_path / "run"
    shutil.copytree(two_processes, run, ignore=shutil.ignore_patterns("eval", "drafter"))
    # as if the 2-process job died after step 4: only its step-4 checkpoint remains
    shutil.rmtree(run / "checkpoints" / "step-0000008")
    shutil.rmtree(run / "checkpoints" / "final")
    _train(run)  # one process picks it up
    _assert_same_training(run, one_process)


@pytest.mark.skipif(find_spec("deepspeed") is None, reason="DeepSpeed is not installed; pip install -e '.[deepspeed]'")
@pytest.mark.parametrize("stage", ["zero2"])  # ZeRO-3: test_sharded_target_trains_eagle3_like_a_replicated_one
def test_two_deepspeed_processes_train_like_one(tmp_path, one_process, stage):
    run = _with_data(tmp_path, one_process)
    config = REPO / "conf" / "accelerate" / f"{stage}.yaml"
    _train(run, "--config_file", str(config), "--num_processes", "2", "--mixed_precision", "no")
    _assert_same_training(run, one_process)
    assert _target_held(run)["sharding"] == "replicate"  # ZeRO-2 shards no parameters


def _target_held(run_dir) -> dict:
    return json.loads((run_dir / "checkpoints" / "final" / "train_summary.json").read_text())["target"]


EAGLE3 = ["drafter=eagle3", "drafter.layer_ids=[0,1,2]", "drafter.select_samples=8"]
ZERO3 = ["--config_file", str(REPO / "conf" / "accelerate" / "zero3.yaml"), "--num_processes", "2"]


@pytest.fixture(scope="module")
def eagle3_reference(tmp_path_factory, one_process):
    """EAGLE-3 on 1 process with the whole target, its features written offline."""
    reference = _with_data(tmp_path_factory.mktemp("eagle3"), one_process, "one")
    _train(reference, overrides=[*EAGLE3, "drafter.features=offline"])
    return reference


@pytest.mark.parametrize(
    "setting, sharding, launch",
    [
        ("fsdp", "fsdp", CPU_DDP),  # FSDP2 shards the target beside a DDP drafter (accelerate's FSDP needs GPUs)
        # the default under a ZeRO-3 launch, which also shards the drafter: its export is gathered
        ("auto", "zero3", [*ZERO3, "--mixed_precision", "no"]),
    ],
)
def test_sharded_target_trains_eagle3_like_a_replicated_one(
    tmp_path, one_process, eagle3_reference, setting, sharding, launch
):
    """Each of 2 processes holds half of the frozen target, and EAGLE-3 (features from the target's layers, written
    by the sharded forwards of both processes in lockstep; its lm_head; embeddings copied into the drafter) trains
    exactly as 1 process with the whole target does."""
    if sharding == "zero3" and find_spec("deepspeed") is None:
        pytest.skip("DeepSpeed is not installed; pip install -e '.[deepspeed]'")
    run = _with_data(tmp_path, one_process, "two")  # no features yet: the 2 processes write them
    _train(run, *launch, overrides=[*EAGLE3, "drafter.features=offline", f"trainer.target_sharding={setting}"])
    reference = eagle3_reference
    _assert_same_training(run, reference)
    whole, half = _target_held(reference), _target_held(run)
    assert whole["sharding"] == "replicate" and whole["bytes_per_process"] == whole["bytes"]
    assert half["sharding"] == sharding and half["bytes"] == whole["bytes"]
    assert abs(half["bytes_per_process"] - whole["bytes"] / 2) <= 0.01 * whole["bytes"]  # padding aside: exactly 1/2


def test_two_processes_train_on_policy_like_one(tmp_path, one_process):
    """With greedy drafts the drafter's own answers do not depend on the process that drafts them, and
    both processes agree on which micro-batches are on-policy, so 2 processes train as 1 does. (Sampled
    drafts are drawn per process, so those runs agree in distribution only.)"""
    on_policy = ["trainer.policy=on_policy", "trainer.on_policy_fraction=0.5", "trainer.on_policy_temperature=0.0"]
    reference = _with_data(tmp_path, one_process, "one")
    _train(reference, overrides=on_policy)
    run = _with_data(tmp_path, one_process, "two")
    _train(run, *CPU_DDP, overrides=on_policy)
    _assert_same_training(run, reference)
    log = (run / "checkpoints" / "log.jsonl").read_text()
    assert '"on_policy": 1.0' in log and '"on_policy": 0.0' in log  # both kinds of micro-batch were trained on
    assert _losses(reference) != pytest.approx(_losses(one_process), rel=1e-3)  # the drafter's answers were used


def test_several_processes_need_an_explicit_run_dir(tmp_path, monkeypatch):
    from tests.cli_runs import run_app

    monkeypatch.chdir(tmp_path)
    for name, value in {"WORLD_SIZE": "2", "RANK": "0"}.items():  # what a launcher sets for each process
        monkeypatch.setenv(name, value)
    code, _, err = run_app("train", [*TRAIN, "stages=[train]"])
    assert code == 2
    assert (
        err.strip().splitlines()[-1] == "error: 2 processes were launched without run_dir; "
        "set run_dir=PATH so that every process uses the same run directory"
    )
    assert not (tmp_path / "runs").exists()
