import json
import shutil

from distill.config import DataConfig, SamplingConfig, TargetConfig
from distill.stage.manifest import read_manifest
from distill.stage.run import distill
from distill.stage.shards import load_distilled


def _cfgs():
    target = TargetConfig(name_or_path="toyworld:micro")
    data = DataConfig(
        max_prompts=20, batch_size=4, shard_size=6, sampling=SamplingConfig(temperature=0.9, max_new_tokens=12)
    )
    return target, data


def test_killed_distill_resumes_to_the_same_dataset(tmp_path, micro_world):
    target, data = _cfgs()
    full = distill(target, data, tmp_path / "full", "cpu")
    assert full["counts"]["samples"] == 20 and full["num_shards"] == 4

    partial = distill(target, data, tmp_path / "resumed", "cpu", stop_after_shards=2)  # "killed" after 2 shards
    assert partial == {"complete": False, "shards_done": 2}
    assert read_manifest(tmp_path / "resumed") is None  # no manifest until complete
    (tmp_path / "resumed" / "shards" / ".tmp-leftover").mkdir()  # debris of a kill mid-write is ignored
    resumed = distill(target, data, tmp_path / "resumed", "cpu")
    assert resumed["counts"] == full["counts"]
    a, b = load_distilled(tmp_path / "full"), load_distilled(tmp_path / "resumed")
    assert a.to_list() == b.to_list()  # same samples, none duplicated or lost
    assert sorted(a["prompt_index"]) == a["prompt_index"] and len(set(a["prompt_index"])) == 20


def test_samples_mask_only_the_answer_and_rerun_is_skipped(tmp_path, micro_world, tokenizer):
    target, data = _cfgs()
    manifest = distill(target, data, tmp_path / "d", "cpu")
    ds = load_distilled(tmp_path / "d")
    for row in ds:
        n = row["prompt_length"]
        assert row["loss_mask"] == [0] * n + [1] * (len(row["input_ids"]) - n)
        assert tokenizer.decode(row["input_ids"][:n]).endswith("<|assistant|>")
        if row["finish_reason"] == "stop":
            assert row["input_ids"][-1] == tokenizer.eos_token_id
    shutil.rmtree(tmp_path / "d" / "shards" / "shard-00000")  # a skipped stage doesn't touch shards
    assert distill(target, data, tmp_path / "d", "cpu") == manifest


def test_mixed_prompt_sources_keep_their_own_split_and_cap(tmp_path, micro_world, tokenizer):
    from distill.config import PromptSource

    def write(name, texts):
        path = tmp_path / name
        path.write_text(
            "".join(
                json.dumps({"messages": [{"role": "user", "content": t}, {"role": "assistant", "content": t[::-1]}]})
                + "\n"
                for t in texts
            )
        )
        return str(path)

    first, second = write("a.jsonl", [f"a{i}" for i in range(5)]), write("b.jsonl", [f"b{i}" for i in range(5)])
    data = DataConfig(
        prompts=first, max_prompts=2, regenerate=False, holdout=0, mix=[PromptSource(prompts=second, max_prompts=3)]
    )
    distill(TargetConfig(name_or_path="toyworld:micro"), data, tmp_path / "out", "cpu")
    rows = load_distilled(tmp_path / "out")
    texts = [tokenizer.decode(ids) for ids in rows["input_ids"]]
    assert [next(w for w in ("a0", "a1", "b0", "b1", "b2", "a2", "b3") if w in t) for t in texts] == [
        "a0",
        "a1",
        "b0",
        "b1",
        "b2",
    ]
    assert sorted(rows["prompt_index"]) == rows["prompt_index"] and len(set(rows["prompt_index"])) == 5
