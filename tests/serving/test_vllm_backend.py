"""data.backend=vllm: the same dataset as the transformers backend, at serving speed."""

from dataclasses import replace

import pytest

from distill.config import DataConfig, SamplingConfig, TargetConfig
from distill.errors import DistillError
from distill.stage.manifest import read_manifest
from distill.stage.run import distill
from distill.stage.shards import load_distilled

TARGET = TargetConfig(name_or_path="toyworld:micro")
GREEDY = DataConfig(
    max_prompts=24,
    batch_size=8,
    shard_size=12,
    max_prompt_tokens=96,
    sampling=SamplingConfig(temperature=0.0, max_new_tokens=32),
)


@pytest.mark.needs_vllm
def test_vllm_backend_regenerates_the_same_greedy_dataset_as_transformers(tmp_path, micro_world):
    hf = distill(TARGET, GREEDY, tmp_path / "hf", "cpu")
    vllm = distill(TARGET, replace(GREEDY, backend="vllm"), tmp_path / "vllm", "cpu")
    a, b = load_distilled(tmp_path / "hf"), load_distilled(tmp_path / "vllm")
    assert a.to_list() == b.to_list()  # same tokens, loss masks, prompt lengths and finish reasons
    assert {r: n for r, n in a.to_pandas()["finish_reason"].value_counts().items()} == hf["counts"]["finish_reasons"]
    assert set(hf["counts"]["finish_reasons"]) == {"stop", "length"}  # both endings exercised
    assert (hf["backend"], vllm["backend"]) == ("hf", "vllm") and vllm["counts"] == hf["counts"]


@pytest.mark.needs_vllm
def test_vllm_sampled_distillation_resumes_to_the_same_answers(tmp_path, micro_world):
    """Per-prompt seeds: a run killed after one shard and resumed equals an uninterrupted run."""
    data = replace(
        GREEDY,
        backend="vllm",
        max_prompts=16,
        shard_size=8,
        sampling=SamplingConfig(temperature=0.9, max_new_tokens=16),
    )
    distill(TARGET, data, tmp_path / "full", "cpu")
    assert distill(TARGET, data, tmp_path / "resumed", "cpu", stop_after_shards=1) == {
        "complete": False,
        "shards_done": 1,
    }
    distill(TARGET, data, tmp_path / "resumed", "cpu")
    assert load_distilled(tmp_path / "full").to_list() == load_distilled(tmp_path / "resumed").to_list()


def test_vllm_backend_without_vllm_is_one_clear_error_and_writes_nothing(tmp_path, micro_world, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(
        DistillError, match=r"data.backend=vllm needs vLLM, which is not installed: pip install 'drafthub\[vllm\]'"
    ):
        distill(TARGET, replace(GREEDY, backend="vllm"), tmp_path / "d", "cpu")
    assert not (tmp_path / "d").exists() and read_manifest(tmp_path / "d") is None
