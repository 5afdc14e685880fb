"""Raw-corpus data (`data.source=corpus`) and nested subsets of a distilled set (the data-scaling benchmark)."""

import json

import pytest

from distill.config import DataConfig, SamplingConfig, TargetConfig
from distill.errors import DistillError
from distill.prompts.corpus_windows import corpus_examples
from distill.stage.parts import first_samples
from distill.stage.run import distill
from distill.stage.shards import load_distilled

MICRO = TargetConfig(name_or_path="toyworld:micro")


def test_corpus_rows_are_raw_text_windows_that_mask_nothing(tmp_path, micro_world, tokenizer):
    data = DataConfig(source="corpus", max_prompts=10, corpus_window=48, shard_size=4)
    manifest = distill(MICRO, data, tmp_path / "c", "cpu")
    rows = load_distilled(tmp_path / "c")
    assert manifest["source"] == "corpus" and manifest["counts"]["samples"] == 10
    assert manifest["counts"]["assistant_tokens"] == manifest["counts"]["tokens"] == 480  # every token counts
    for row in rows:
        assert len(row["input_ids"]) == 48 and row["loss_mask"] == [1] * 48 and row["prompt_length"] == 0
        assert "<|user|>" not in tokenizer.decode(row["input_ids"])  # plain text, no chat template
    from train.data import collate

    batch = collate([[5, 6, 7], [8]], [[1, 1, 1], [1]], 16, tokenizer.pad_token_id)
    assert (batch["loss_mask"] * batch["attention_mask"]).tolist() == [[1, 1, 1], [1, 0, 0]]  # padding alone is out


def test_corpus_windows_are_nested_and_a_too_short_corpus_is_refused(tokenizer):
    texts = ["def f(x):\n    return x + 1\n" * 40, "class A:\n    pass\n" * 40]
    few, many = (corpus_examples(texts, tokenizer, 16, n, seed=0) for n in (5, 50))
    assert many[:5] == few
    with pytest.raises(DistillError, match="corpus_window"):
        corpus_examples(["x"], tokenizer, 16, 5, seed=0)


def test_first_samples_equal_a_smaller_distillation(tmp_path, micro_world):
    greedy = SamplingConfig(temperature=0, max_new_tokens=12)
    big = DataConfig(max_prompts=12, batch_size=4, shard_size=4, sampling=greedy)
    small = DataConfig(max_prompts=6, batch_size=4, shard_size=4, sampling=greedy)
    distill(MICRO, big, tmp_path / "big", "cpu")
    manifest = first_samples(tmp_path / "big", tmp_path / "sub", MICRO, small)
    direct = distill(MICRO, small, tmp_path / "direct", "cpu")
    assert manifest["config_hash"] == direct["config_hash"]  # a run with max_prompts=6 takes it as its own
    assert load_distilled(tmp_path / "sub").to_list() == load_distilled(tmp_path / "direct").to_list()
    assert distill(MICRO, small, tmp_path / "sub", "cpu") == json.loads(
        (tmp_path / "sub" / "manifest.json").read_text()
    )
    other = DataConfig(max_prompts=6, batch_size=4, shard_size=4, sampling=SamplingConfig(temperature=0.5))
    with pytest.raises(DistillError, match="not distilled with these settings"):
        first_samples(tmp_path / "big", tmp_path / "x", MICRO, other)
