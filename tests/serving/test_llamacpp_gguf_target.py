"""A GGUF target with llama.cpp built: its tokenizer checked against llama-tokenize, and llama-server serving the
original file as the target (python -m eval target_path=model.gguf eval.serve=llamacpp)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distill.config import TargetConfig
from distill.errors import DistillError
from distill.inputs import cache_root, file_digest
from distill.targets import gguf as gguf_source
from distill.targets import resolve_target
from heads.formats import llamacpp
from tests.cli_runs import run_app
from tests.exporting import export
from tests.gguf_files import write_gguf

pytestmark = pytest.mark.needs_llamacpp  # registered in pyproject.toml


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A fresh drafthub cache that still finds the session's llama.cpp build."""
    monkeypatch.setenv("DRAFTHUB_LLAMACPP", str(llamacpp.programs.home()))
    monkeypatch.setenv("DRAFTHUB_CACHE", str(tmp_path / "cache"))


def test_a_gguf_tokenizer_is_checked_against_llama_cpp_and_refused_when_they_differ(
    micro_world, tmp_path, own_cache, monkeypatch
):
    """llama.cpp's smollm pre-tokenizer splits digits one by one. With a merge of two digits in the vocabulary,
    drafthub's rule for it reads "12" as llama.cpp does; without the rule (transformers' own reading: GPT-2's split)
    the check finds "12" as one token where llama.cpp has two, and refuses before writing anything."""
    smollm = write_gguf(micro_world.target_dir, tmp_path / "smollm.gguf", pre="smollm", extra_merges=(("1", "2"),))
    record = json.loads((Path(resolve_target(str(smollm))) / llamacpp.target.GGUF_SOURCE).read_text())
    assert record["tokenizer_checked"] is True and record["pre_tokenizer"] == "smollm"
    monkeypatch.delitem(gguf_source.PRE_TOKENIZERS, "smollm")
    other = write_gguf(micro_world.target_dir, tmp_path / "other.gguf", pre="smollm", extra_merges=(("2", "3"),))
    with pytest.raises(DistillError, match=r"transformers reads the tokenizer of other\.gguf differently from llama"):
        resolve_target(TargetConfig(name_or_path=str(other)))
    assert len(list((cache_root() / "targets").glob("gguf-*/"))) == 1  # the first one only


def test_llama_server_serves_the_original_gguf_as_the_target(micro_world, target, tokenizer, tmp_path):
    from tests.serving.test_served_check import fitted_draft_lm

    original = write_gguf(micro_world.target_dir, tmp_path / "target.gguf")
    drafter = export(
        fitted_draft_lm(target, tokenizer), tmp_path / "drafter", tokenizer=tokenizer, engines=("llamacpp",)
    )
    argv = [
        f"drafter_dir={drafter}",
        f"prompts={micro_world.prompts_file('heldout')}",
        f"target_path={original}",
        f"out_dir={tmp_path / 'ev'}",
        "serve=llamacpp",
        "eval.num_prompts=6",  # the served-check tests' settings (tests/serving/settings.py)
        "eval.warmup_prompts=0",
        "eval.max_new_tokens=24",
        "eval.num_speculative_tokens=3",
        "eval.gamma_sweep=[]",
        "eval.llamacpp.speed_repeats=0",
    ]
    code, _, err = run_app("eval", argv)
    assert code == 0, err[-2000:]
    served = json.loads((tmp_path / "ev" / "eval_report.json").read_text())["served"]
    # the user's GGUF, not a conversion of our directory: this file, or (a test in another worker resolving the same
    # bytes at the same time, as gguf._point_at allows) a file with exactly its bytes
    served_file = Path(served["target_gguf"])
    assert llamacpp.programs.home() / "targets" not in served_file.parents  # where conversions are cached
    assert file_digest(served_file) == file_digest(original)
    assert served["verdict"] == "ok" and served["equal_prompts"] == 6, served["reason"]
