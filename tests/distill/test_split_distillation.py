"""data.num_shards / data.shard_index: a distillation split over independent jobs merges into the one-job dataset."""

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from distill.config import DataConfig, SamplingConfig, TargetConfig
from distill.errors import DistillError
from distill.stage.parts import merge_parts
from distill.stage.run import distill
from distill.stage.shards import load_distilled
from tests.conftest import REPO

TARGET = TargetConfig(name_or_path="toyworld:micro")
DATA = DataConfig(
    max_prompts=10, batch_size=4, shard_size=3, sampling=SamplingConfig(temperature=0.9, max_new_tokens=12)
)


@pytest.fixture(scope="module")
def one_job(tmp_path_factory, micro_world):
    out = tmp_path_factory.mktemp("one")
    return out, distill(TARGET, DATA, out, "cpu")


def _parts(root, count):
    return [root / f"part{k}" for k in range(count)]


def test_two_jobs_merged_equal_one_job_token_for_token(tmp_path, one_job):
    reference, manifest = one_job
    parts = _parts(tmp_path, 2)
    for k, part in enumerate(parts):  # sampled answers: every shard keeps its own seed, whichever job draws it
        summary = distill(TARGET, replace(DATA, num_shards=2, shard_index=k), part, "cpu")
        assert summary["complete"] and summary["shards"] == list(range(k, 4, 2))
        assert not (part / "manifest.json").exists()  # a part is not a dataset
    merged = merge_parts(parts, tmp_path / "merged", TARGET, DATA)
    assert load_distilled(tmp_path / "merged").to_list() == load_distilled(reference).to_list()
    assert {k: v for k, v in merged.items() if k != "seconds"} == {k: v for k, v in manifest.items() if k != "seconds"}
    assert merge_parts(parts, tmp_path / "merged", TARGET, DATA)["counts"] == manifest["counts"]  # rerun: a no-op


def test_merging_refuses_missing_unfinished_or_foreign_parts(tmp_path, one_job):
    parts = _parts(tmp_path, 3)
    for k in (0, 1):
        distill(TARGET, replace(DATA, num_shards=3, shard_index=k), parts[k], "cpu")
    with pytest.raises(DistillError, match=r"the parts are jobs \[0, 1\] of 3; merge every job 0…2 exactly once"):
        merge_parts(parts[:2], tmp_path / "m", TARGET, DATA)
    with pytest.raises(DistillError, match=r"part2 holds no finished part \(part.json\); run or finish its job first"):
        merge_parts(parts, tmp_path / "m", TARGET, DATA)
    with pytest.raises(DistillError, match="was distilled with other settings; merge with the settings its jobs used"):
        merge_parts(parts[:2], tmp_path / "m", TARGET, replace(DATA, max_prompts=9))
    assert not (tmp_path / "m" / "manifest.json").exists()


@pytest.mark.slow  # three CLI runs in fresh interpreters
def test_the_cli_runs_a_part_and_refuses_a_bad_index(tmp_path, micro_world):
    common = ["target=micro", "data.max_prompts=4", "data.sampling.max_new_tokens=4", "data.shard_size=2"]

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "distill", *common, *args], cwd=REPO, capture_output=True, text=True, timeout=300
        )

    ok = cli("data.num_shards=2", "data.shard_index=1", f"out_dir={tmp_path / 'p1'}")
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert ok.stdout.strip().splitlines()[-1] == f"{tmp_path / 'p1'}: part 1 of 2 done (1 shards)"
    bad = cli("data.num_shards=2", "data.shard_index=2", f"out_dir={tmp_path / 'p2'}")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1] == "error: data.shard_index=2 must be ≥ 0 and < data.num_shards=2"
    assert not (tmp_path / "p2").exists()
    assert json.loads((tmp_path / "p1" / "part.json").read_text())["shards"] == [1]
