"""More prompts keep a smaller dataset's answers (distill/stage/extend.py): the grown dataset equals one distilled
whole."""

import json

from distill.config import DataConfig, PromptSource, SamplingConfig, TargetConfig
from distill.stage.extend import seed_shards
from distill.stage.run import distill
from distill.stage.shards import load_distilled

TARGET = TargetConfig(name_or_path="toyworld:micro")


def _prompts(path, prefix, count):
    path.write_text(
        "".join(json.dumps({"messages": [{"role": "user", "content": f"{prefix} {i}"}]}) + "\n" for i in range(count))
    )
    return str(path)


def test_more_prompts_keep_the_full_shards_and_end_as_one_distillation(tmp_path, micro_world):
    first, second = _prompts(tmp_path / "a.jsonl", "def f", 12), _prompts(tmp_path / "b.jsonl", "class C", 3)

    def data(max_prompts):  # sampled answers, and a mixed-in source after data.prompts
        sampling = SamplingConfig(temperature=0.9, max_new_tokens=8)
        mix = [PromptSource(prompts=second, max_prompts=3)]
        return DataConfig(prompts=first, max_prompts=max_prompts, holdout=0, shard_size=2, sampling=sampling, mix=mix)

    small = distill(TARGET, data(5), tmp_path / "small", "cpu")
    assert small["prompts"]["first_source_samples"] == 5 and small["counts"]["samples"] == 8

    # 5 of data.prompts' samples: two full shards; the third holds a mixed-in sample, which more prompts move
    assert seed_shards(tmp_path / "small", tmp_path / "grown", TARGET, data(9)) == 4
    assert distill(TARGET, data(9), tmp_path / "grown", "cpu", stop_after_shards=0)["shards_done"] == 2
    distill(TARGET, data(9), tmp_path / "grown", "cpu")
    distill(TARGET, data(9), tmp_path / "whole", "cpu")
    grown, whole = load_distilled(tmp_path / "grown"), load_distilled(tmp_path / "whole")
    assert grown.to_list() == whole.to_list()
    assert grown.select(range(4)).to_list() == load_distilled(tmp_path / "small").select(range(4)).to_list()

    # other settings (the answers' length), or fewer prompts: nothing is kept
    other = DataConfig(**{**data(9).__dict__, "sampling": SamplingConfig(temperature=0.9, max_new_tokens=6)})
    assert seed_shards(tmp_path / "small", tmp_path / "other", TARGET, other) == 0
    assert seed_shards(tmp_path / "small", tmp_path / "fewer", TARGET, data(3)) == 0
    assert not (tmp_path / "other").exists() and not (tmp_path / "fewer").exists()
