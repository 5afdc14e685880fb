"""The one prompt reader (distill, the eval stage, python -m eval): every format users bring, and one clear line
naming the file, its line or row, and the setting for every way their data goes wrong."""

import json
import re
import shutil
from dataclasses import replace

import datasets
import pytest

from distill.errors import DistillError
from distill.prompts.read import load_conversations, read_prompts
from distill.prompts.sets import humaneval_file

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
        load_conversations(_jsonl(tmp_path / "p.jsonl", {"body": "hello"}), "train")


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
    datasets.Dataset.from_list([{"body": "x"}]).to_parquet(str(g))
    with pytest.raises(
        DistillError,
        match=rf"^{re.escape(str(g))}: no 'messages', 'conversations' \(ShareGPT\), 'turns', 'prompt' or 'text' "
        r"\(raw text to continue\) column; found \['body'\]; set data.prompts_column to the one holding the prompts$",
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
    """Not a prompt, but the same kind of user data: load_target and python -m eval share distill.targets.load's line
    (tests/test_bad_inputs.py runs the eval side through the app)."""
    from pathlib import Path

    from distill.config import TargetConfig
    from distill.targets.load import load_target

    target = Path(__file__).parents[1] / "data" / "bin-only-target"
    with pytest.raises(DistillError) as e:
        load_target(TargetConfig(name_or_path=str(target)))
    assert str(e.value) == (
        f"target {target} has only pytorch_model.bin: drafthub loads safetensors weights only; convert the weights "
        "(e.g. model.save_pretrained(dir, safe_serialization=True)) and pass target.name_or_path=dir"
    )


# ---- the field's evaluation sets: turns (MT-Bench, Spec-Bench), prompt (HumanEval), a named column ---------------

OWED = {"role": "assistant", "content": None}  # an answer the target owes: written turn by turn
SPEC_BENCH = [
    {"question_id": 81, "category": "writing", "turns": ["Write a blog post.", "Rewrite it in rhymes."]},
    {"question_id": 161, "category": "qa", "turns": ["Who wrote Hamlet?"]},
]
TURNS_READ = [
    [{"role": "user", "content": "Write a blog post."}, OWED, {"role": "user", "content": "Rewrite it in rhymes."}],
    [{"role": "user", "content": "Who wrote Hamlet?"}],
]


def test_turns_rows_are_user_turns_with_the_answers_the_target_owes_and_keep_their_category(tmp_path):
    rows = read_prompts(_jsonl(tmp_path / "question.jsonl", *SPEC_BENCH), None)
    assert rows.conversations == TURNS_READ and rows.categories == ["writing", "qa"]
    assert load_conversations(str(tmp_path / "question.jsonl"), None) == TURNS_READ
    plain = read_prompts(_jsonl(tmp_path / "p.jsonl", CONV, *SHAREGPT), None)
    assert plain.categories == [None, None, None]  # rows without a category


def test_the_target_answers_a_turns_row_one_turn_after_another():
    from distill.prompts.chat import answered, pending_turn, prompt_messages

    first, more = pending_turn(TURNS_READ[0])
    assert (first, more) == (TURNS_READ[0][:1], True)
    second, more = pending_turn(answered(TURNS_READ[0], "A post."))
    assert more is False and second == [*first, {"role": "assistant", "content": "A post."}, TURNS_READ[0][2]]
    assert pending_turn(CONV["messages"]) == (prompt_messages(CONV["messages"]), False)  # other rows: as before


@pytest.mark.parametrize(
    "turns, got",
    [([], "an empty list"), ("Who wrote Hamlet?", "a str"), (["one", 2], "a list holding an int")],
)
def test_turns_that_are_not_a_non_empty_list_of_strings_are_named(tmp_path, turns, got):
    f = _jsonl(tmp_path / "question.jsonl", SPEC_BENCH[0], {"category": "qa", "turns": turns})
    with pytest.raises(DistillError) as e:
        read_prompts(f, None)
    assert str(e.value) == f"{f}:2: 'turns' must be a non-empty list of strings, one per user turn; got {got}"


def test_a_category_that_is_not_a_string_is_named(tmp_path):
    f = _jsonl(tmp_path / "question.jsonl", {"category": ["writing"], "turns": ["hi"]})
    with pytest.raises(DistillError, match=r"question\.jsonl:1: 'category' must be a string \(e\.g\. \"writing\"\)"):
        read_prompts(f, None)


def test_humaneval_rows_are_one_user_turn_and_a_gzipped_jsonl_is_read(tmp_path):
    import gzip

    rows = [{"task_id": "HumanEval/0", "prompt": "def add(a, b):\n", "entry_point": "add"}, {"prompt": "import os\n"}]
    with gzip.open(tmp_path / "HumanEval.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    assert load_conversations(str(tmp_path / "HumanEval.jsonl.gz"), None) == [
        [{"role": "user", "content": "def add(a, b):\n"}],
        [{"role": "user", "content": "import os\n"}],
    ]
    (tmp_path / "broken.jsonl.gz").write_bytes(b"not gzip at all")
    with pytest.raises(DistillError, match=r"broken\.jsonl\.gz is not a readable gzip file \(BadGzipFile: .*check"):
        load_conversations(str(tmp_path / "broken.jsonl.gz"), None)


def test_the_packaged_humaneval_is_164_code_stubs():
    path = humaneval_file()
    assert path.name == "HumanEval.jsonl.gz" and path.is_file()
    conversations = load_conversations(str(path), None)
    assert len(conversations) == 164
    assert all(len(c) == 1 and c[0]["role"] == "user" and "def " in c[0]["content"] for c in conversations)


def test_a_prompt_that_is_not_a_string_is_named_with_the_column_setting(tmp_path):
    f = _jsonl(tmp_path / "p.jsonl", {"prompt": "x = 1\n"}, {"prompt": [{"role": "user", "content": "hi"}]})
    with pytest.raises(DistillError) as e:
        load_conversations(f, None)
    assert str(e.value) == (
        f"{f}:2: 'prompt' must be a string (one user turn), got list; to read it by what it holds (turns, messages), "
        "set data.prompts_column=prompt"
    )
    assert load_conversations(f, None, column="prompt")[1] == [{"role": "user", "content": "hi"}]


def test_rows_with_several_prompt_fields_read_the_first_of_messages_conversations_turns_prompt(tmp_path):
    both = {"prompt": "ignored", "turns": ["ignored"], "messages": CONV["messages"]}
    assert load_conversations(_jsonl(tmp_path / "p.jsonl", both), None) == [CONV["messages"]]
    assert load_conversations(_jsonl(tmp_path / "q.jsonl", {"prompt": "p", "turns": ["t"]}), None) == [
        [{"role": "user", "content": "t"}]
    ]


COLUMNS = [  # one dataset, a prompt column of each shape the setting reads
    {"question": "Who wrote Hamlet?", "dialogue": ["hi", "and then?"], "chat": CONV["messages"], "category": "qa"},
    {"question": "2 + 2?", "dialogue": ["one"], "chat": CONV["messages"], "category": "math"},
]


def test_a_saved_dataset_is_read_from_the_column_named_by_what_it_holds(tmp_path):
    datasets.DatasetDict({"test": datasets.Dataset.from_list(COLUMNS)}).save_to_disk(str(tmp_path / "dd"))
    where = str(tmp_path / "dd")
    question = read_prompts(where, "test", column="question")
    assert question.conversations == [
        [{"role": "user", "content": "Who wrote Hamlet?"}],
        [{"role": "user", "content": "2 + 2?"}],
    ]
    assert question.categories == ["qa", "math"]
    assert load_conversations(where, "test", column="dialogue")[0] == [
        {"role": "user", "content": "hi"},
        OWED,
        {"role": "user", "content": "and then?"},
    ]
    assert load_conversations(where, "test", column="chat") == [CONV["messages"]] * 2
    with pytest.raises(DistillError) as e:
        load_conversations(where, "test", column="questions", prompts_key="eval_prompts", split_key="eval_split")
    assert str(e.value) == (
        f"{where}: no column 'questions', only ['category', 'chat', 'dialogue', 'question']; set eval_prompts_column "
        "to the one holding the prompts"
    )


def test_a_directory_of_parquet_data_files_is_read_from_the_named_column(tmp_path):
    (tmp_path / "repo" / "data").mkdir(parents=True)
    datasets.Dataset.from_list(COLUMNS).to_parquet(str(tmp_path / "repo" / "data" / "test-00000-of-00001.parquet"))
    rows = read_prompts(str(tmp_path / "repo"), "test", column="dialogue", prompts_key="prompts", split_key="split")
    assert [len(c) for c in rows.conversations] == [3, 1] and rows.categories == ["qa", "math"]
    with pytest.raises(DistillError, match=r"repo: no column 'text', only \['category', .*; set prompts_column to"):
        read_prompts(str(tmp_path / "repo"), "test", column="text", prompts_key="prompts", split_key="split")


def test_a_named_column_that_holds_no_prompt_is_named_with_its_setting(tmp_path):
    f = _jsonl(tmp_path / "p.jsonl", {"q": "fine"}, {"q": 3}, {"q": []})
    with pytest.raises(DistillError) as e:
        load_conversations(f, None, column="q")
    assert str(e.value) == (
        f"{f}:2: 'q' (data.prompts_column) holds an int; a prompts column holds a string (one user turn), a list of "
        "strings (turns), [{role, content}] messages or ShareGPT [{from, value}] turns"
    )
    with pytest.raises(DistillError, match=r"p\.jsonl:1: no field 'r', only \['q'\]; set data.prompts_column to the"):
        load_conversations(f, None, column="r")


def test_distill_answers_every_turn_of_a_named_column_and_keeps_no_answers_it_has_not(tmp_path, micro_world):
    from distill.config import DataConfig, SamplingConfig, TargetConfig
    from distill.stage.run import distill
    from distill.stage.shards import load_distilled

    rows = [{"category": "qa", "dialogue": ["def f():\n", "import os\n"]}, {"dialogue": ["x = 1\n"]}]
    path = _jsonl(tmp_path / "bench.jsonl", *rows)
    micro, greedy = TargetConfig(name_or_path="toyworld:micro"), SamplingConfig(temperature=0, max_new_tokens=4)
    data = DataConfig(prompts=path, prompts_column="dialogue", holdout=0, sampling=greedy)
    assert distill(micro, data, tmp_path / "out", "cpu")["counts"]["samples"] == 3  # one sample per turn
    assert load_distilled(tmp_path / "out")["prompt_index"] == [0, 0, 1]
    data.regenerate, data.prompts_column = False, None
    with pytest.raises(DistillError, match=r"^prompt 0 is a `turns` row, which holds no answers to keep"):
        distill(micro, replace(data, prompts=_jsonl(tmp_path / "t.jsonl", {"turns": ["a", "b"]})), tmp_path / "k")


def test_a_prompt_completion_row_is_answered_by_its_completion_or_by_the_target(tmp_path, micro_world):
    """TRL's prompt-completion rows: `data.regenerate=false` trains on the completion (every token of it and the
    end-of-turn token, nothing of the prompt); `true` has the target answer the same prompt instead."""
    from distill.config import DataConfig, SamplingConfig, TargetConfig
    from distill.prompts.chat import encode_prompt
    from distill.stage.run import distill
    from distill.stage.shards import load_distilled
    from distill.targets.load import load_tokenizer

    rows = [{"prompt": "def f():\n", "completion": "    return 1\n", "category": "c"}, {"prompt": "x = "}]
    path = _jsonl(tmp_path / "pc.jsonl", *rows)
    datasets.Dataset.from_list(rows[:1]).to_parquet(tmp_path / "pc.parquet")
    answered = [{"role": "user", "content": "def f():\n"}, {"role": "assistant", "content": "    return 1\n"}]
    assert load_conversations(path, None) == [answered, [{"role": "user", "content": "x = "}]]
    assert load_conversations(str(tmp_path / "pc.parquet"), None) == [answered]
    micro = TargetConfig(name_or_path="toyworld:micro")
    data = DataConfig(prompts=_jsonl(tmp_path / "one.jsonl", rows[0]), holdout=0, regenerate=False)
    distill(micro, data, tmp_path / "kept", "cpu")
    kept = load_distilled(tmp_path / "kept")[0]
    tokenizer = load_tokenizer(micro)
    trained = [t for t, m in zip(kept["input_ids"], kept["loss_mask"]) if m]
    assert tokenizer.decode(trained).startswith("    return 1\n") and kept["finish_reason"] == "dataset"
    assert kept["input_ids"][: kept["prompt_length"]] == encode_prompt(tokenizer, answered[:1])
    greedy = replace(data, regenerate=True, sampling=SamplingConfig(temperature=0, max_new_tokens=4))
    distill(micro, greedy, tmp_path / "target", "cpu")
    answer = load_distilled(tmp_path / "target")[0]
    assert answer["input_ids"][: answer["prompt_length"]] == kept["input_ids"][: kept["prompt_length"]]
    assert answer["finish_reason"] != "dataset" and sum(answer["loss_mask"]) <= 4
    with pytest.raises(DistillError, match=r"pc2\.jsonl:1: 'completion' must be a string \(the answer to 'prompt'\)"):
        load_conversations(_jsonl(tmp_path / "pc2.jsonl", {"prompt": "a", "completion": ["b"]}), None)


def test_stdlib_code_answers_are_stdlib_codes_requests_with_the_stdlibs_own_functions(tmp_path, monkeypatch):
    from distill.prompts import stdlib_code

    (tmp_path / "lib").mkdir()
    source = 'def mean_of(values):\n    """Return the arithmetic mean of values, in a module of its own."""\n'
    (tmp_path / "lib" / "stats_like.py").write_text(source + "    return sum(values) / len(values)\n")
    monkeypatch.setattr(stdlib_code.sysconfig, "get_paths", lambda: {"stdlib": str(tmp_path / "lib")})
    monkeypatch.setenv("DRAFTHUB_CACHE", str(tmp_path / "cache"))
    requests, answered = read_prompts("stdlib_code", None), read_prompts("stdlib_code_answers", None)
    assert (
        [c[0] for c in answered.conversations]
        == [c[0] for c in requests.conversations]
        == [{"role": "user", "content": source}]
    )
    assert answered.conversations[0][1] == {
        "role": "assistant",
        "content": source + "    return sum(values) / len(values)\n",
    }


def test_raw_text_rows_are_continued_untemplated_and_their_completions_kept(tmp_path, micro_world):
    """A base model's prompts: `{"text": …}` is continued as it is (its own ids, the tokenizer's start token first),
    the target's continuation trained on and nothing of the text; with data.regenerate=false the row's completion
    is the continuation. The completion prompt sets read HumanEval's and the stdlib's stubs so."""
    from distill.config import DataConfig, SamplingConfig, TargetConfig
    from distill.prompts.chat import TEXT
    from distill.stage.run import distill
    from distill.stage.shards import load_distilled
    from distill.targets.load import load_tokenizer

    rows = [{"text": "def add(a, b):\n", "completion": "    return a + b\n"}, {"text": "import os\n"}]
    path = _jsonl(tmp_path / "text.jsonl", *rows)
    continued = [{"role": TEXT, "content": "def add(a, b):\n"}, {"role": "assistant", "content": "    return a + b\n"}]
    assert load_conversations(path, None) == [continued, [{"role": TEXT, "content": "import os\n"}]]
    humaneval = read_prompts("humaneval_completion", None).conversations[0]
    assert humaneval == [{"role": TEXT, "content": read_prompts("humaneval", None).conversations[0][0]["content"]}]
    assert all(c[0]["role"] == TEXT for c in load_conversations("stdlib_continue", None)[:50])
    micro = TargetConfig(name_or_path="toyworld:micro")
    data = DataConfig(prompts=_jsonl(tmp_path / "one.jsonl", rows[0]), holdout=0, regenerate=False)
    distill(micro, data, tmp_path / "kept", "cpu")
    kept, tokenizer = load_distilled(tmp_path / "kept")[0], load_tokenizer(micro)
    text_ids = tokenizer("def add(a, b):\n")["input_ids"]
    assert kept["input_ids"][: kept["prompt_length"]] == text_ids
    assert tokenizer.decode([t for t, m in zip(kept["input_ids"], kept["loss_mask"]) if m]) == "    return a + b\n"
    greedy = replace(data, regenerate=True, sampling=SamplingConfig(temperature=0, max_new_tokens=4))
    distill(micro, greedy, tmp_path / "target", "cpu")
    answer = load_distilled(tmp_path / "target")[0]
    assert answer["input_ids"][: answer["prompt_length"]] == text_ids and sum(answer["loss_mask"]) >= 1
    with pytest.raises(DistillError, match=r"bad\.jsonl:1: 'text' must be a non-empty string"):
        load_conversations(_jsonl(tmp_path / "bad.jsonl", {"text": ["a"]}), None)


def test_a_chat_row_for_a_target_without_a_template_names_the_row_and_both_ways_out(tmp_path, micro_world):
    """Checked as distill reads the rows too (prompts on the Hub are not read before the run): the first chat row
    is named; raw text beside it is fine."""
    from distill.config import DataConfig, TargetConfig
    from distill.stage.run import distill

    template_less = tmp_path / "no-template"
    shutil.copytree(micro_world.target_dir, template_less)
    (template_less / "chat_template.jinja").unlink(missing_ok=True)
    settings = json.loads((template_less / "tokenizer_config.json").read_text())
    settings.pop("chat_template", None)
    (template_less / "tokenizer_config.json").write_text(json.dumps(settings))
    path = _jsonl(tmp_path / "mixed.jsonl", {"text": "x = 1\n"}, {"prompt": "def f():\n"})
    data = DataConfig(prompts=path, holdout=0)
    with pytest.raises(DistillError, match=r"^data\.prompts row 2 is a chat conversation, and the target has no chat"):
        distill(TargetConfig(name_or_path=str(template_less)), data, tmp_path / "out", "cpu")
    assert not (tmp_path / "out" / "manifest.json").exists()
