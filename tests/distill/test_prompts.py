"""The one prompt reader (distill, the eval stage, python -m eval): every format users bring, and one clear line
naming the file, its line or row, and the setting for every way their data goes wrong."""

import json
import re

import datasets
import pytest

from distill.errors import DistillError
from distill.prompts import load_conversations

CONV = {"messages": [{"role": "user", "content": "import os\n"}, {"role": "assistant", "content": "import sys\n"}]}
SHAREGPT = [
    {"id": "a1", "conversations": [{"from": "human", "value": "def f():"}, {"from": "gpt", "value": "    pass"}]},
    {"id": "b2", "conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "x = "}]},
]
SHAREGPT_READ = [
    [{"role": "user", "content": "def f():"}, {"role": "assistant", "content": "    pass"}],
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "x = "}],
]


def _jsonl(path, *rows, encoding="utf-8"):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding=encoding)
    return str(path)


def test_malformed_jsonl_line_is_named(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps(CONV) + "\n{not json\n")
    with pytest.raises(DistillError, match=r"p\.jsonl:2: malformed JSON"):
        load_conversations(str(f), "train")


def test_missing_messages_field_is_named(tmp_path):
    with pytest.raises(DistillError, match=r"p\.jsonl:1: no 'messages'"):
        load_conversations(_jsonl(tmp_path / "p.jsonl", {"text": "hello"}), "train")


def test_sharegpt_conversations_are_converted(tmp_path):
    assert load_conversations(_jsonl(tmp_path / "p.jsonl", *SHAREGPT), "train") == SHAREGPT_READ


def test_a_sharegpt_json_list_is_read(tmp_path):
    f = tmp_path / "sharegpt.json"
    f.write_text(json.dumps(SHAREGPT, indent=2))
    assert load_conversations(str(f), "train") == SHAREGPT_READ


def test_an_ultrachat_like_parquet_is_read_by_its_messages_column(tmp_path):
    rows = [{"prompt": "import os\n", "prompt_id": "p0", "messages": CONV["messages"]}]
    datasets.Dataset.from_list(rows * 2).to_parquet(str(tmp_path / "ultrachat.parquet"))
    assert load_conversations(str(tmp_path / "ultrachat.parquet"), "train") == [CONV["messages"]] * 2


def test_a_saved_dataset_dict_loads_the_split_asked_for_and_names_the_others(tmp_path):
    other = {"messages": [{"role": "user", "content": "held out"}]}
    saved = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list([CONV]), "test": datasets.Dataset.from_list([other, other])}
    )
    saved.save_to_disk(str(tmp_path / "dd"))
    where = str(tmp_path / "dd")
    assert load_conversations(where, "train") == [CONV["messages"]]
    assert load_conversations(where, "test") == [other["messages"]] * 2
    with pytest.raises(DistillError) as e:
        load_conversations(where, "validation")
    assert str(e.value) == f"{where} has no split 'validation', only ['test', 'train']; set data.split to one of them"
    with pytest.raises(DistillError, match=r"has no split 'heldout', only \['test', 'train'\]; set eval_split to"):
        load_conversations(where, "heldout", split_key="eval_split")
    with pytest.raises(DistillError, match=r"dd has splits \['test', 'train'\]; set split to one of them$"):
        load_conversations(where, None, prompts_key="prompts", split_key="split")  # python -m eval's default


def test_a_saved_dataset_loads_whatever_the_split(tmp_path):
    datasets.Dataset.from_list(SHAREGPT).save_to_disk(str(tmp_path / "ds"))
    assert load_conversations(str(tmp_path / "ds"), "heldout") == SHAREGPT_READ  # one table: like a file


def test_a_dataset_directory_of_data_files_loads_through_load_dataset(tmp_path):
    # laid out like a Hub repo: the same load_dataset code path hub names take
    (tmp_path / "repo" / "data").mkdir(parents=True)
    datasets.Dataset.from_list([CONV, CONV]).to_parquet(
        str(tmp_path / "repo" / "data" / "train-00000-of-00001.parquet")
    )
    assert load_conversations(str(tmp_path / "repo"), "train") == [CONV["messages"]] * 2
    assert load_conversations(str(tmp_path / "repo"), None) == [CONV["messages"]] * 2  # its only split
    with pytest.raises(DistillError, match=r"repo has no split 'validation', only \['train'\]; set data.split"):
        load_conversations(str(tmp_path / "repo"), "validation")
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        DistillError, match=r"empty is a directory but not a dataset \(EmptyDatasetError: .*save_to_disk"
    ):
        load_conversations(str(tmp_path / "empty"), "train")


def test_text_content_parts_are_joined_as_a_chat_server_joins_them(tmp_path):
    parts = [{"type": "text", "text": "import os"}, {"type": "text", "text": "import sys"}]
    row = {"messages": [{"role": "user", "content": parts}, {"role": "assistant", "content": [parts[0]]}]}
    assert load_conversations(_jsonl(tmp_path / "p.jsonl", row), "train") == [
        [{"role": "user", "content": "import os\nimport sys"}, {"role": "assistant", "content": "import os"}]
    ]


def test_a_non_text_content_part_is_one_error_naming_the_line(tmp_path):
    image = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    row = {"messages": [{"role": "user", "content": [{"type": "text", "text": "what is it?"}, image]}]}
    with pytest.raises(DistillError) as e:
        load_conversations(_jsonl(tmp_path / "p.jsonl", CONV, row), "train")
    assert str(e.value) == (
        f"{tmp_path / 'p.jsonl'}:2: message 1 has a content part of type 'image_url'; only text parts "
        '({"type": "text", "text": "..."}) are supported: drop the others or the conversation'
    )


def test_a_byte_order_mark_is_not_malformed_json(tmp_path):
    assert (
        load_conversations(_jsonl(tmp_path / "p.jsonl", CONV, CONV, encoding="utf-8-sig"), "train")
        == [CONV["messages"]] * 2
    )
    (tmp_path / "p.json").write_text(json.dumps([CONV]), encoding="utf-8-sig")
    assert load_conversations(str(tmp_path / "p.json"), "train") == [CONV["messages"]]


def test_a_latin1_file_is_named_with_its_line_and_the_fix(tmp_path):
    f = tmp_path / "latin1.jsonl"
    f.write_bytes(
        json.dumps(CONV).encode() + b"\n" + '{"messages": [{"role": "user", "content": "café"}]}\n'.encode("latin-1")
    )
    with pytest.raises(DistillError) as e:
        load_conversations(str(f), "train")
    assert str(e.value) == (
        f"{f}:2 is not UTF-8 (byte 0xe9 at column 47); re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)"
    )
    g = tmp_path / "latin1.json"
    g.write_bytes(b"[\n" + json.dumps(CONV).encode() + b",\n" + '{"messages": "café"}\n]'.encode("latin-1"))
    with pytest.raises(DistillError, match=r"latin1\.json:3 is not UTF-8 \(byte 0xe9 at column 18\); re-encode"):
        load_conversations(str(g), "train")


@pytest.mark.parametrize("text", ["", "[]", " [\n ]\n"])
def test_an_empty_json_file_holds_no_conversations(tmp_path, text):
    f = tmp_path / "empty.json"
    f.write_text(text)
    with pytest.raises(DistillError) as e:
        load_conversations(str(f), "train")
    assert str(e.value) == (
        f'{f} holds no conversations; give it a JSON list of {{"messages": [...]}} objects (or one object per line, '
        "JSONL)"
    )


def test_an_empty_sharegpt_row_is_an_empty_conversation_and_a_non_list_is_named(tmp_path):
    """Real ShareGPT dumps hold rows with no turns: read as empty (distill drops and counts them)."""
    f = tmp_path / "sharegpt.json"
    f.write_text(json.dumps([*SHAREGPT, {"id": "c3", "conversations": []}], indent=2))
    assert load_conversations(str(f), "train") == [*SHAREGPT_READ, []]
    f.write_text(json.dumps([*SHAREGPT, {"id": "c3", "conversations": "hi"}], indent=2))
    with pytest.raises(DistillError) as e:
        load_conversations(str(f), "train")
    assert str(e.value) == f"{f}:28: 'conversations' must be a list of ShareGPT {{from, value}} turns"


def test_a_file_without_an_extension_is_sniffed(tmp_path):
    _jsonl(tmp_path / "jsonl", CONV)
    (tmp_path / "json").write_text(json.dumps(SHAREGPT, indent=1))
    datasets.Dataset.from_list([CONV]).to_parquet(str(tmp_path / "parquet"))
    assert load_conversations(str(tmp_path / "jsonl"), "train") == [CONV["messages"]]
    assert load_conversations(str(tmp_path / "json"), "train") == SHAREGPT_READ
    assert load_conversations(str(tmp_path / "parquet"), "train") == [CONV["messages"]]


def test_a_path_that_is_nothing_and_a_name_that_loads_nowhere(tmp_path, monkeypatch):
    with pytest.raises(DistillError, match=r"^prompts file .*nothing does not exist; check data.prompts$"):
        load_conversations(str(tmp_path / "nothing"), "train")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # a hub lookup fails at once, no retries
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DistillError) as e:
        load_conversations("my_prompts", "train", prompts_key="prompts", split_key="split")
    assert str(e.value).startswith(
        "prompts 'my_prompts' is neither a local file or directory nor a dataset that loads from the Hub ("
    ) and str(e.value).endswith("); check prompts")


def test_json_and_parquet_errors_name_the_file(tmp_path):
    f = tmp_path / "p.json"
    f.write_text("[\n" + json.dumps(CONV) + ",\n" + '{"messages": [}\n]')
    with pytest.raises(DistillError, match=rf"^{re.escape(str(f))}:3: malformed JSON \(Expecting value at column 15\)"):
        load_conversations(str(f), "train")
    f.write_text(json.dumps(CONV, indent=1))  # one object, not a list (nor JSONL)
    with pytest.raises(DistillError, match=rf"^{re.escape(str(f))}: expected a JSON list of .*, got an object$"):
        load_conversations(str(f), "train")
    g = tmp_path / "p.parquet"
    g.write_text("not parquet at all")
    with pytest.raises(
        DistillError, match=rf"^{re.escape(str(g))} is not a readable parquet file \(ArrowInvalid: .*check data.prompts"
    ):
        load_conversations(str(g), "train")
    datasets.Dataset.from_list([{"text": "x"}]).to_parquet(str(g))
    with pytest.raises(
        DistillError, match=rf"^{re.escape(str(g))}: no 'messages' \(or ShareGPT 'conversations'\) column; found"
    ):
        load_conversations(str(g), "train")


def test_toyworld_prompts_need_a_toy_world_target():
    with pytest.raises(DistillError, match=r"^prompts=toyworld reads the toy world's prompts, so it needs a toy"):
        load_conversations("toyworld", None, None, prompts_key="prompts")


def test_distill_runs_on_a_jsonl_with_a_byte_order_mark(tmp_path, micro_world):
    from tests.cli_runs import run_app

    rows = [{"messages": [{"role": "user", "content": f"def f{i}():\n"}]} for i in range(4)]
    prompts = _jsonl(tmp_path / "bom.jsonl", *rows, encoding="utf-8-sig")
    code, _, err = run_app(
        "distill",
        ["target=micro", f"data.prompts={prompts}", f"out_dir={tmp_path / 'out'}", "data.sampling.max_new_tokens=4"],
    )
    assert code == 0, err[-2000:]
    assert (tmp_path / "out" / "manifest.json").is_file()


def test_a_target_with_only_pickled_weights_gets_the_message_python_m_eval_gives():
    """Not a prompt, but the same kind of user data: load_target and python -m eval share distill.target's line
    (tests/test_bad_inputs.py runs the eval side through the app)."""
    from pathlib import Path

    from distill.config import TargetConfig
    from distill.target import load_target

    target = Path(__file__).parents[1] / "data" / "bin-only-target"
    with pytest.raises(DistillError) as e:
        load_target(TargetConfig(name_or_path=str(target)))
    assert str(e.value) == (
        f"target {target} has only pytorch_model.bin: drafthub loads safetensors weights only; convert the weights "
        "(e.g. model.save_pretrained(dir, safe_serialization=True)) and pass target.name_or_path=dir"
    )
