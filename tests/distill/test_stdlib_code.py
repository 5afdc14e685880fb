"""Code requests from the stdlib (distill/prompts/stdlib_code.py): each public top-level function with a docstring
becomes its signature and docstring, no body; tests, private names and duplicates are left out; built once per
Python."""

from __future__ import annotations

import json

import pytest

from distill.prompts import stdlib_code
from distill.prompts.read import read_prompts

MODULE = '''"""A module."""


@functools.cache
def mean_of(values: list[float], *, skip_nan: bool = False) -> float:
    """Return the arithmetic mean of values, leaving NaNs out when skip_nan is set."""
    values = [v for v in values if not (skip_nan and v != v)]
    return sum(values) / len(values)


def _private(x):
    """A helper that is private to this module and never a request."""
    return x


def short(x):
    """Too short."""


class Box:
    def open(self):
        """A method: only top-level functions become requests, with their own context."""
'''


@pytest.fixture
def stdlib(tmp_path, monkeypatch):
    root = tmp_path / "lib"
    (root / "pkg").mkdir(parents=True)
    (root / "test").mkdir()
    (root / "stats_like.py").write_text(MODULE)
    (root / "pkg" / "__init__.py").write_text(MODULE)  # the same function twice: one request
    (root / "test" / "helpers.py").write_text(MODULE.replace("mean_of", "in_a_test_dir"))
    (root / "broken.py").write_text("def (:\n")
    monkeypatch.setattr(stdlib_code.sysconfig, "get_paths", lambda: {"stdlib": str(root)})
    monkeypatch.setenv("DRAFTHUB_CACHE", str(tmp_path / "cache"))
    return root


def test_a_request_is_the_signature_and_docstring_without_the_body(stdlib):
    path = stdlib_code.stdlib_code_file()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows == [
        {
            "prompt": "@functools.cache\ndef mean_of(values: list[float], *, skip_nan: bool = False) -> float:\n"
            '    """Return the arithmetic mean of values, leaving NaNs out when skip_nan is set."""\n',
            "category": "pkg",
        }
    ]
    assert path.parent == stdlib.parent / "cache" / "prompt_sets"


def test_built_once_and_read_as_a_prompt_set(stdlib):
    path = stdlib_code.stdlib_code_file()
    (stdlib / "more.py").write_text(MODULE.replace("mean_of", "median_of"))
    assert stdlib_code.stdlib_code_file() == path and len(path.read_text().splitlines()) == 1  # not rebuilt
    requests = read_prompts("stdlib_code", None)
    assert requests.conversations == [[{"role": "user", "content": json.loads(path.read_text())["prompt"]}]]


CLASSES_ONLY = '''"""A module of classes: none of its functions is a training stub."""

import os


class Reader:
    """Read records from a file."""

    def read(self):
        """Return the next record, or None at the end of the file."""
        return os.environ.get("RECORD")
'''
PADDING = "\n# padding to the size of a long-context file\n" * 80


def test_the_long_context_set_is_whole_files_none_of_whose_functions_is_a_training_stub(stdlib):
    from distill.prompts import stdlib_files

    (stdlib / "reader.py").write_text(CLASSES_ONLY + PADDING)
    (stdlib / "stats_long.py").write_text(MODULE + "\n# padding\n" * 250)  # big enough, but mean_of is a stub
    (stdlib / "tiny.py").write_text('"""Too small to be a long context."""\n')
    path = stdlib_files.stdlib_files_file()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [row["prompt"].split("`")[1] for row in rows] == ["reader"]
    prompt = rows[0]["prompt"]
    assert (CLASSES_ONLY + PADDING).rstrip() in prompt and prompt.endswith(stdlib_files.QUESTIONS[0])
    trained = {turn["content"] for turns in read_prompts("stdlib_code", None).conversations for turn in turns}
    assert not any(stub in prompt for stub in trained)
    measured = read_prompts("stdlib_files", None)
    assert measured.conversations == [[{"role": "user", "content": prompt}]] and measured.categories == ["stdlib_files"]


def test_a_dataset_from_another_pythons_stdlib_code_is_refused_not_reused(micro_world, tmp_path, monkeypatch):
    """The prompt set's name stays the same on another Python, its bytes don't: the old dataset is neither reused
    in its run directory nor lent to another one."""
    from distill.config import DataConfig, SamplingConfig, TargetConfig
    from distill.errors import DistillError
    from distill.stage.manifest import config_hash
    from distill.stage.run import distill
    from train.stages.run_dir import find_dataset

    root = tmp_path / "lib"
    root.mkdir()
    (root / "stats_like.py").write_text(MODULE)
    monkeypatch.setattr(stdlib_code.sysconfig, "get_paths", lambda: {"stdlib": str(root)})
    monkeypatch.setattr(stdlib_code, "prompt_set_path", lambda name: tmp_path / "py3.11" / f"{name}.jsonl")
    target = TargetConfig(name_or_path="toyworld:micro")
    data = DataConfig(prompts="stdlib_code", holdout=0, sampling=SamplingConfig(max_new_tokens=4))
    monkeypatch.chdir(tmp_path)
    manifest = distill(target, data, tmp_path / "runs" / "r" / "a" / "data")
    assert set(manifest["prompt_sets"]) == {"stdlib_code"}
    assert distill(target, data, tmp_path / "runs" / "r" / "a" / "data") == manifest  # same bytes: reused
    (root / "more.py").write_text(MODULE.replace("mean_of", "median_of"))  # another Python's standard library
    monkeypatch.setattr(stdlib_code, "prompt_set_path", lambda name: tmp_path / "py3.12" / f"{name}.jsonl")
    with pytest.raises(DistillError, match=r"was distilled from other prompts than stdlib_code gives now"):
        distill(target, data, tmp_path / "runs" / "r" / "a" / "data")
    assert find_dataset(config_hash(target, data), tmp_path / "runs" / "r" / "b" / "data", data) is None
