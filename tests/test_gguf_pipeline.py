"""The whole pipeline on a GGUF target whose prompts the target wrote itself (Magpie), measured on a benchmark by
name: the sources `target=smollm2` uses (tests/test_main_job.py runs SmolLM2 itself), on the micro target written as
a GGUF by the tests, with the toy recipe's draft LM."""

from __future__ import annotations

import json

import pytest
import torch

from distill.inputs import file_digest
from tests.cli_runs import run_app
from tests.gguf_files import write_gguf
from tests.test_first_run import FEW_STEPS


@pytest.mark.slow
def test_a_gguf_target_distils_magpie_requests_trains_and_is_measured_on_humaneval(micro_world, tmp_path):
    target = write_gguf(micro_world.target_dir, tmp_path / "micro.gguf")
    argv = [
        "recipe=toy",
        "target=hf",
        f"target.name_or_path={target}",
        "target.dtype=float32",
        "data.prompts=magpie",
        "data.max_prompts=8",
        "data.holdout=0",  # eval measures HumanEval: nothing of the requests to hold out
        "data.sampling.max_new_tokens=8",
        "eval_prompts=humaneval",
        *FEW_STEPS,
        "stages=[distill,train,eval]",
        f"run_dir={tmp_path / 'run'}",
    ]
    code, out, err = run_app("train", argv)
    assert code == 0, err[-2000:]
    manifest = json.loads((tmp_path / "run" / "data" / "manifest.json").read_text())
    assert manifest["counts"]["samples"] == 8, manifest
    assert manifest["inputs"]["target"] == file_digest(target)
    assert (tmp_path / "run" / "data" / "magpie.jsonl").is_file()
    report = json.loads((tmp_path / "run" / "eval" / "eval_report.json").read_text())
    assert report["lossless"] is True and report["prompts"]["overlap"] == 0
    assert list(report["categories"]) == ["humaneval"]


@pytest.mark.slow
def test_a_base_models_gguf_continues_code_and_is_measured_on_humaneval_continued(micro_world, tmp_path):
    """recipes/gguf_completion.yaml as a base-model user runs it: a GGUF declaring no chat template continues the
    stdlib's stubs as raw text, the retrieval drafter is built from its continuations and measured on HumanEval's
    stubs continued, losslessly; where llama.cpp is built (CI) it serves the original file and the same ids as
    completions, with the store as its n-gram cache."""
    from heads.formats import llamacpp

    served = llamacpp.programs.missing() is None
    target = write_gguf(micro_world.target_dir, tmp_path / "base.gguf", chat_template=False)
    argv = [
        "recipe=gguf_completion",
        f"target.name_or_path={target}",
        "data.max_prompts=12",
        "data.sampling.max_new_tokens=16",
        "eval.num_prompts=3",
        "eval.max_new_tokens=16",
        *(["eval.serve=llamacpp", "publish.engines=[llamacpp]"] if served else []),
        f"run_dir={tmp_path / 'run'}",
    ]
    code, out, err = run_app("train", argv)
    assert code == 0, err[-2000:]
    report = json.loads((tmp_path / "run" / "eval" / "eval_report.json").read_text())
    assert report["lossless"] is True and report["prompts"]["overlap"] == 0
    assert list(report["categories"]) == ["humaneval_completion"]
    manifest = json.loads((tmp_path / "run" / "data" / "manifest.json").read_text())
    assert manifest["counts"]["samples"] == 12 and manifest["prompts"]["source"] == "stdlib_continue"
    if served:
        served = report["served"]
        assert served["engine"] == "llamacpp" and served["method"] == "ngram-cache", served
        assert served["verdict"] == "ok" and served["equal_prompts"] >= 3, served["reason"]


@pytest.mark.slow
def test_a_gemma3_style_gguf_trains_eagle3_and_is_measured_losslessly(tmp_path):
    """A Gemma-3-style target as llama.cpp users hold it (tests/gemma_gguf.py: K-quants, five sliding-window layers
    in six, scaled embeddings, a SentencePiece vocabulary): EAGLE-3 distils, trains on stored features and is
    measured losslessly on decodes past the sliding window. The drafter's input embedding is the
    target's embedding rows as vLLM shares them with an EAGLE-3 drafter (unscaled: Gemma's √hidden is applied in
    the target's forward, which the drafter never runs). Where llama.cpp is built (CI), the same file serves as
    llama.cpp's target for a retrieval drafter (recipes/gguf_completion.yaml); llama.cpp's EAGLE-3 beside a Gemma 3
    target is refused up front (its gemma3 graph hands the drafter no layer inputs: tests/test_bad_inputs.py)."""
    from safetensors.torch import load_file

    from distill.config import TargetConfig
    from distill.targets.load import load_target
    from tests.gemma_gguf import SLIDING_WINDOW, write_gemma3_gguf

    target = write_gemma3_gguf(tmp_path / "gemma3.gguf")
    argv = [
        "recipe=toy_eagle",
        "target=hf",
        f"target.name_or_path={target}",
        "target.dtype=float32",
        "drafter.layer_ids=[1,3,5]",  # low, middle, high of six layers (sliding, sliding, full)
        "drafter.draft_vocab_size=512",
        "data.prompts=stdlib_code",
        "data.max_prompts=8",
        "data.holdout=0",
        "data.sampling.max_new_tokens=24",
        "drafter.select_samples=0",
        "eval_prompts=humaneval",
        *FEW_STEPS,
        f"eval.max_new_tokens={SLIDING_WINDOW}",  # prompts and answers past the window
        "stages=[distill,train,eval]",
        f"run_dir={tmp_path / 'run'}",
    ]
    code, out, err = run_app("train", argv)
    assert code == 0, err[-3000:]
    report = json.loads((tmp_path / "run" / "eval" / "eval_report.json").read_text())
    assert report["lossless"] is True, report
    model = load_target(TargetConfig(name_or_path=str(target)))
    assert model.config.layer_types.count("sliding_attention") == 5 and model.config.sliding_window == SLIDING_WINDOW
    assert model.get_input_embeddings().embed_scale == model.config.hidden_size**0.5  # Gemma's scaled embeddings
    drafter = load_file(str(tmp_path / "run" / "drafter" / "model.safetensors"))
    embedding = next(v for k, v in drafter.items() if k.endswith("embed_tokens.weight"))
    assert torch.equal(embedding, model.get_input_embeddings().weight.to(embedding.dtype))
    from heads.formats import llamacpp

    if llamacpp.programs.missing() is None:
        served = [
            "recipe=gguf_completion",
            f"target.name_or_path={target}",
            "data.max_prompts=12",
            "data.sampling.max_new_tokens=16",
            "eval.num_prompts=3",
            f"eval.max_new_tokens={SLIDING_WINDOW}",
            "eval.serve=llamacpp",
            "publish.engines=[llamacpp]",
            f"run_dir={tmp_path / 'served'}",
        ]
        code, out, err = run_app("train", served)
        assert code == 0, err[-3000:]
        report = json.loads((tmp_path / "served" / "eval" / "eval_report.json").read_text())
        assert report["lossless"] and report["served"]["verdict"] == "ok", report["served"]["reason"]
        assert report["served"]["equal_prompts"] == 3
