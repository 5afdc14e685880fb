import json

import datasets
import pytest

from distill.errors import DistillError
from distill.prompts import load_conversations

CONV = {"messages": [{"role": "user", "content": "import os\n"}, {"role": "assistant", "content": "import sys\n"}]}


def test_malformed_jsonl_line_is_named(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps(CONV) + "\n{not json\n")
    with pytest.raises(DistillError, match=r"p\.jsonl:2: malformed JSON"):
        load_conversations(str(f), "train")


def test_missing_messages_field_is_named(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"text": "hello"}) + "\n")
    with pytest.raises(DistillError, match=r"p\.jsonl:1: no 'messages'"):
        load_conversations(str(f), "train")


def test_sharegpt_conversations_are_converted(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text(
        json.dumps({"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}) + "\n"
    )
    assert load_conversations(str(f), "train") == [
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    ]


def test_parquet_and_local_hf_dataset_directory(tmp_path):
    ds = datasets.Dataset.from_list([CONV, CONV])
    ds.to_parquet(str(tmp_path / "p.parquet"))
    assert load_conversations(str(tmp_path / "p.parquet"), "train") == [CONV["messages"]] * 2
    # A dataset directory laid out like a Hub repo: the same load_dataset code path hub names take.
    (tmp_path / "repo" / "data").mkdir(parents=True)
    ds.to_parquet(str(tmp_path / "repo" / "data" / "train-00000-of-00001.parquet"))
    assert load_conversations(str(tmp_path / "repo"), "train") == [CONV["messages"]] * 2
    with pytest.raises(DistillError, match="could not load prompts"):
        load_conversations(str(tmp_path / "repo"), "validation")
