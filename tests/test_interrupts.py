"""What a user meets mid-run: Ctrl-C, a full disk, a path the run cannot use, a Hub push without a token or a
network, `accelerate=NAME`. Each is one line and a non-zero exit, never a traceback, and a rerun after an
interrupt or a full disk resumes from the last complete state to the same result."""

import errno
import os
import shutil
from collections import namedtuple
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conf.cli import INTERRUPTED, INTERRUPTED_LINE
from tests.cli_runs import run_app, run_push
from tests.train.publishing import published_drafter

TRAIN = [
    "recipe=toy",
    "target=micro",
    "data.max_prompts=8",
    "data.sampling.max_new_tokens=16",
    "trainer.max_steps=4",
    "trainer.save_every=2",
    "trainer.batch_size=4",
]
EVAL = [
    "eval.num_prompts=1",
    "eval.warmup_prompts=0",
    "eval.max_new_tokens=4",
    "eval.gamma_sweep=[]",
    "publish.verify_prompts=0",
    "publish.min_tau=1.0",  # the untrained toy drafter's τ: the gate lets it through to the upload
]
DISTILL = ["target=micro", "data.max_prompts=4", "data.shard_size=2", "data.sampling.max_new_tokens=8"]
NO_SPACE = "free space and rerun — nothing was lost"
SECRET = "hf_drafthubDummyTokenNeverPrinted"
DEAD_ENDPOINT = "http://127.0.0.1:9"  # loopback, nothing listens: a connection fails at once


def _last_line(err: str) -> str:
    return err.strip().splitlines()[-1]


def _steps(ckpts):
    """What the checkpoint folder holds besides its log."""
    return sorted(name for name in os.listdir(ckpts) if name != "log.jsonl")


def _weights(run_dir):
    return load_file(str(run_dir / "checkpoints" / "final" / "model.safetensors"))


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, micro_world):
    """One uninterrupted distill → train → eval run: the weights a resumed run must end with, a run to publish."""
    run_dir = tmp_path_factory.mktemp("straight") / "run"
    code, _, err = run_app("train", [*TRAIN, *EVAL, "stages=[distill,train,eval]", f"run_dir={run_dir}"])
    assert code == 0, err[-3000:]
    return run_dir


@pytest.mark.parametrize(
    "app, argv",
    [
        ("train", ["recipe=toy", "target=micro", "run_dir=OUT/run"]),
        ("distill", ["target=micro", "out_dir=OUT"]),
        ("eval", ["drafter_dir=OUT", "prompts=OUT/p.jsonl", "out_dir=OUT/ev"]),
    ],
)
def test_ctrl_c_is_one_line_and_exit_130_in_every_app(tmp_path, monkeypatch, app, argv):
    from omegaconf import OmegaConf

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(OmegaConf, "to_object", interrupted)  # each app's first step inside its Hydra task
    code, _, err = run_app(app, [a.replace("OUT", str(tmp_path)) for a in argv])
    # train and distill resume where they stopped; python -m eval has nothing to resume and says so
    line = "interrupted; python -m eval does not resume: rerun the same command" if app == "eval" else INTERRUPTED_LINE
    assert code == INTERRUPTED and err.strip().startswith(line) and "\n" not in err.strip()


def test_training_stopped_by_ctrl_c_or_a_full_disk_resumes_to_the_same_weights(tmp_path, monkeypatch, finished_run):
    """One run, three mishaps: Ctrl-C after step 2's checkpoint, the disk filling while step 4's checkpoint is
    half written, then while the final weights are. Each is one line; nothing half written stays; each rerun
    resumes from the last complete checkpoint, and the last one ends with the weights of a run never stopped."""
    from accelerate import Accelerator

    import train.loop
    from heads.draft_lm import DraftLM

    run_dir, ckpts = tmp_path / "run", tmp_path / "run" / "checkpoints"
    save_checkpoint, save_state, save_pretrained = (
        train.loop.save_checkpoint,
        Accelerator.save_state,
        DraftLM.save_pretrained,
    )
    load_latest, resumed_from = train.loop.load_latest, []
    monkeypatch.setattr(train.loop, "load_latest", lambda *a: resumed_from.append(load_latest(*a)) or resumed_from[-1])

    def train_run():
        code, _, err = run_app("train", [*TRAIN, "stages=[distill,train]", f"run_dir={run_dir}"])
        assert "Traceback" not in err
        return code, _last_line(err) if code else ""

    def ctrl_c_after_step_2(accelerator, root, step, *args, **kwargs):
        save_checkpoint(accelerator, root, step, *args, **kwargs)
        if step == 2:
            raise KeyboardInterrupt  # during step 3

    monkeypatch.setattr(train.loop, "save_checkpoint", ctrl_c_after_step_2)
    assert train_run() == (INTERRUPTED, INTERRUPTED_LINE)
    assert _steps(ckpts) == ["step-0000002"]
    monkeypatch.setattr(train.loop, "save_checkpoint", save_checkpoint)

    def full_disk_in_step_4(self, output_dir, **kwargs):
        save_state(self, output_dir, **kwargs)
        if output_dir.endswith("step-0000004"):
            os.truncate(os.path.join(output_dir, "optimizer.bin"), 9)  # written in part
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Accelerator, "save_state", full_disk_in_step_4)
    assert train_run() == (2, f"error: no space left on {ckpts}; {NO_SPACE}") and resumed_from[-1] == 2
    assert _steps(ckpts) == ["step-0000002"]  # no half-written step 4
    monkeypatch.setattr(Accelerator, "save_state", save_state)

    def full_disk_in_final(self, path):
        save_pretrained(self, path)
        os.truncate(os.path.join(path, "model.safetensors"), 9)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(DraftLM, "save_pretrained", full_disk_in_final)
    assert train_run() == (2, f"error: no space left on the device; {NO_SPACE}") and resumed_from[-1] == 2
    assert _steps(ckpts) == ["step-0000002", "step-0000004"]  # no half-written final
    assert all((ckpts / step / "meta.json").exists() for step in ("step-0000002", "step-0000004"))
    monkeypatch.setattr(DraftLM, "save_pretrained", save_pretrained)

    assert train_run() == (0, "") and resumed_from[-1] == 4
    straight, resumed = _weights(finished_run), _weights(run_dir)
    assert straight.keys() == resumed.keys() and all(torch.equal(straight[k], resumed[k]) for k in straight)


class _Accelerator:
    """What save_checkpoint uses of accelerate's Accelerator; save_state writes the weights, then `error` strikes."""

    is_main_process = True

    def __init__(self, error=None):
        self.error = error

    def wait_for_everyone(self):
        pass

    def save_state(self, output_dir, safe_serialization):
        os.makedirs(output_dir, exist_ok=True)
        (Path(output_dir) / "model.safetensors").write_bytes(b"w" * 64)
        if self.error:
            (Path(output_dir) / "optimizer.bin").write_bytes(b"o")
            raise self.error
        (Path(output_dir) / "optimizer.bin").write_bytes(b"o" * 64)


def test_a_full_disk_however_a_library_says_it_is_enospc_and_leaves_no_partial_checkpoint(tmp_path, monkeypatch):
    from train.checkpoint import checkpoint_dirs, save_checkpoint

    root = tmp_path / "checkpoints"
    save_checkpoint(_Accelerator(), root, 2, {}, keep_last=2)
    torch_says = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
    safetensors_says = Exception("Error while serializing: I/O error: No space left on device (os error 28)")
    with pytest.raises(RuntimeError, match="unexpected pos"):  # a disk with room: not a full disk, not masked
        save_checkpoint(_Accelerator(torch_says), root, 4, {}, keep_last=2)
    full = namedtuple("usage", "total used free")(1 << 30, 1 << 30, 0)
    monkeypatch.setattr("train.checkpoint.shutil.disk_usage", lambda path: full)
    for error in (torch_says, safetensors_says):
        with pytest.raises(OSError) as raised:
            save_checkpoint(_Accelerator(error), root, 4, {}, keep_last=2)
        assert (raised.value.errno, raised.value.filename, raised.value.__cause__) == (errno.ENOSPC, str(root), error)
    assert [p.name for p in checkpoint_dirs(root)] == os.listdir(root) == ["step-0000002"]


def test_distillation_stopped_by_ctrl_c_or_a_full_disk_keeps_its_complete_shards_and_resumes(tmp_path, monkeypatch):
    from distill.stage.shards import ShardWriter

    write, written, fault = ShardWriter.write, [], {}

    def write_shard(self, index, rows):
        if index == 1 and fault:
            raise fault["error"]
        written.append(index)
        write(self, index, rows)

    monkeypatch.setattr(ShardWriter, "write", write_shard)
    for error, expected in (
        (KeyboardInterrupt(), (INTERRUPTED, INTERRUPTED_LINE)),
        (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), (2, f"error: no space left on the device; {NO_SPACE}")),
    ):
        fault["error"] = error
        code, _, err = run_app("distill", [*DISTILL, f"out_dir={tmp_path}/d"])
        assert (code, _last_line(err)) == expected and "Traceback" not in err
        assert os.listdir(tmp_path / "d" / "shards") == ["shard-00000"] and written == [0]
    fault.clear()
    code, out, err = run_app("distill", [*DISTILL, f"out_dir={tmp_path}/d"])
    assert code == 0, err[-2000:]
    assert written == [0, 1] and out.strip().splitlines()[-1].startswith(f"{tmp_path}/d: 4 samples")


def test_a_path_the_run_cannot_use_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    code, _, err = run_app("train", ["recipe=toy", "target=micro", "stages=[distill]", f"run_dir={tmp_path}/file/run"])
    assert (code, err.strip()) == (2, f"error: cannot use {tmp_path}/file/run: Not a directory; check the path")

    def denied(*args):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), "/srv/runs")

    monkeypatch.setattr("train.pipeline.run_pipeline", denied)
    code, _, err = run_app("train", ["recipe=toy", "target=micro"])
    assert (code, err.strip()) == (
        2,
        "error: cannot use /srv/runs: Permission denied; fix its permissions or choose another path",
    )


NO_TOKEN_LINE = "error: no Hugging Face token: run `hf auth login` or set HF_TOKEN"
UNREACHABLE_LINE = (
    f"error: could not reach the Hugging Face Hub ({DEAD_ENDPOINT}: [Errno {errno.ECONNREFUSED}] "
    f"{os.strerror(errno.ECONNREFUSED)}); check the network or publish to a local registry with --hub-dir / "
    "publish.hub_dir"
)
HUB_CASES = pytest.mark.parametrize(
    "token, line", [(None, NO_TOKEN_LINE), (SECRET, UNREACHABLE_LINE)], ids=["no_token", "no_network"]
)


@pytest.fixture
def hub_env(tmp_path, monkeypatch):
    """`hub_env(token)`: only that token (HF_TOKEN; an empty HF_HOME holds none), and a Hub at DEAD_ENDPOINT.

    huggingface_hub reads HF_HOME and HF_ENDPOINT once, on import: its constants are set to match."""
    from huggingface_hub import constants

    def with_token(token):
        for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
            monkeypatch.delenv(name, raising=False)
        if token:
            monkeypatch.setenv("HF_TOKEN", token)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
        monkeypatch.setenv("HF_ENDPOINT", DEAD_ENDPOINT)
        monkeypatch.setattr(constants, "ENDPOINT", DEAD_ENDPOINT)

    return with_token


@HUB_CASES
def test_hub_push_without_token_or_network_is_one_line(tmp_path, target, tokenizer, hub_env, token, line):
    hub_env(token)
    d = published_drafter(tmp_path / "d", target, tokenizer)
    code, out, err = run_push([d, "--repo-id", "me/x"])
    assert (code, _last_line(err)) == (2, line) and "Traceback" not in err and SECRET not in out + err


def test_a_run_that_uploads_without_a_token_stops_before_any_work(tmp_path, hub_env):
    hub_env(None)
    code, _, err = run_app("train", [*TRAIN, f"run_dir={tmp_path}/run", "publish.repo_id=me/x"])
    assert (code, err.strip()) == (2, NO_TOKEN_LINE) and not (tmp_path / "run").exists()


def test_the_publish_stage_without_network_is_one_line(tmp_path, hub_env, finished_run):
    hub_env(SECRET)
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    argv = [*TRAIN, *EVAL, "stages=[publish]", f"run_dir={run_dir}", "publish.repo_id=me/x"]
    code, out, err = run_app("train", argv)
    assert (code, _last_line(err)) == (2, UNREACHABLE_LINE) and "Traceback" not in err and SECRET not in out + err
    assert not (run_dir / "published.json").exists()  # not done: a rerun uploads again


def test_help_lists_the_real_groups_and_says_what_conf_accelerate_is():
    code, out, _ = run_app("train", ["--help"])
    groups = out.split("== Configuration groups ==")[1].split("== Config ==")[0]
    assert code == 0 and "\ndrafter: dflash, dflash2, draft_lm," in groups and "\nrecipe: " in groups
    assert "\naccelerate:" not in groups and "_schema" not in groups
    assert (
        "conf/accelerate/NAME.yaml (ddp, fsdp, zero2, zero3) are not a group: train on several GPUs with\n"
        "accelerate launch --config_file conf/accelerate/NAME.yaml -m train …,\n"
        "or plan for them with plan.accelerate=NAME dry_run=true"
    ) in groups


@pytest.mark.parametrize("arg", ["accelerate=ddp", "+accelerate=ddp"])
def test_accelerate_as_a_group_is_refused_with_the_two_right_ways(tmp_path, arg):
    code, out, err = run_app("train", [arg, f"run_dir={tmp_path}/run"])
    assert (code, out, err.strip()) == (
        2,
        "",
        f"error: {arg}: conf/accelerate/ holds `accelerate launch` config files, not a config group; plan with "
        "plan.accelerate=ddp dry_run=true, or train with accelerate launch --config_file conf/accelerate/ddp.yaml "
        "-m train ...",
    )
    assert not (tmp_path / "run").exists()
