"""data.prompts=magpie (distill/prompts/magpie.py): the target writes its own requests from its chat template up to the
user's message; repeats, cut and empty requests are dropped; the file is written once per settings, then reused."""

from __future__ import annotations

import json

import pytest

from distill.config import DataConfig, SamplingConfig, TargetConfig
from distill.errors import DistillError
from distill.prompts import magpie
from distill.stage.run import distill


class Scripted:
    """A sampler that answers every batch from a script of (text, finish reason), in order."""

    def __init__(self, tokenizer, script):
        self.tokenizer, self.script, self.prompts = tokenizer, list(script), []

    def sample(self, prompts, seed):
        self.prompts.append(prompts[0])
        batch, self.script = self.script[: len(prompts)], self.script[len(prompts) :]
        return [(self.tokenizer.encode(text, add_special_tokens=False), reason) for text, reason in batch]


def test_the_query_prefix_is_the_template_up_to_the_users_message(tokenizer, standin):
    assert tokenizer.decode(magpie.query_prefix(tokenizer)) == "<|user|>"
    from transformers import AutoTokenizer

    qwen = AutoTokenizer.from_pretrained(
        standin("qwen2_5").path
    )  # a template with a default system prompt: the target writes after it
    prefix = qwen.decode(magpie.query_prefix(qwen))
    assert prefix.startswith("<|im_start|>system\nYou are Qwen") and prefix.endswith("<|im_end|>\n<|im_start|>user\n")


def test_repeats_cut_and_short_requests_are_dropped(tokenizer):
    script = [
        ("How do I sort a list of pairs by their second item?", "stop"),
        ("How do I sort a list of pairs by their  SECOND item?!", "stop"),  # the same, normalized
        ("Explain recursion to a child", "length"),  # cut at the cap
        ("Thanks a lot", "stop"),  # under three words? no: three
        ("Hi there", "stop"),  # two words
        ("How do I sort a list of pairs by the first item instead?", "stop"),  # opens with the same 8 words
        ("Write a haiku about rain", "stop"),
    ]
    sampler = Scripted(tokenizer, script + [("Name three prime numbers", "stop")])
    got = magpie.write_requests(sampler, tokenizer, count=4, seed=0, batch_size=4)
    assert got == [script[0][0], "Thanks a lot", script[6][0], "Name three prime numbers"]
    assert sampler.prompts[0] == magpie.query_prefix(tokenizer)
    with pytest.raises(
        DistillError, match=r"the target wrote 1 distinct requests in 8 tries, fewer than data\.max_prompts=2"
    ):
        magpie.write_requests(Scripted(tokenizer, [script[0]] * 8), tokenizer, count=2, seed=0, batch_size=2)


def test_distilling_magpie_requests_writes_them_once_then_reuses_them(micro_world, tmp_path, capsys):
    target = TargetConfig(name_or_path="toyworld:micro")
    data = DataConfig(
        prompts="magpie",
        max_prompts=6,
        holdout=0,
        batch_size=6,
        shard_size=3,
        sampling=SamplingConfig(max_new_tokens=8),
    )
    assert distill(target, data, tmp_path / "data", stop_after_shards=1) == {"complete": False, "shards_done": 1}
    file = tmp_path / "data" / magpie.FILE
    requests = [json.loads(line)["messages"][0]["content"] for line in file.read_text().splitlines()]
    assert len(set(requests)) == 6 and "the target writes 6 requests" in capsys.readouterr().out
    before = file.stat().st_mtime_ns
    manifest = distill(target, data, tmp_path / "data")  # resumed: the requests as written, the rest answered
    assert manifest["counts"]["samples"] == 6 and file.stat().st_mtime_ns == before
    assert "the target writes" not in capsys.readouterr().out
    distill(target, data, tmp_path / "again")  # another directory, the same seeds: the same requests
    assert (tmp_path / "again" / magpie.FILE).read_text() == file.read_text()


def test_magpie_without_a_count_is_refused_before_the_target_loads(tmp_path):
    data = DataConfig(prompts="magpie", max_prompts=0)
    with pytest.raises(DistillError, match=r"data\.prompts=magpie has the target write data\.max_prompts requests"):
        distill(TargetConfig(name_or_path="toyworld:micro"), data, tmp_path / "data")
    assert not (tmp_path / "data").exists()
