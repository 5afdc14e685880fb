"""GGUF files as targets (distill/targets/gguf.py): written by the tests from the micro target with the `gguf`
package, loaded through transformers, dequantized once into a plain directory every engine loads."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from distill.config import TargetConfig
from distill.errors import DistillError
from distill.inputs import cache_root
from distill.targets import resolve_built_target, resolve_target
from distill.targets.load import load_target, load_tokenizer, target_config
from heads.formats.llamacpp.target import GGUF_SOURCE
from heads.formats.llamacpp.tokenizer import TOKENIZER_SAMPLE
from tests.gguf_files import write_gguf

Q8_0 = gguf.GGMLQuantizationType.Q8_0


@pytest.fixture(scope="module")
def micro_gguf(micro_world, tmp_path_factory):
    return write_gguf(micro_world.target_dir, tmp_path_factory.mktemp("gguf") / "micro.f32.gguf")


def _logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits


def test_a_gguf_target_is_the_model_it_was_written_from(micro_gguf, micro_world, target, tokenizer):
    """Weights, tokenizer, chat template and end token survive GGUF → dequantized directory exactly (F32)."""
    cfg = TargetConfig(name_or_path=str(micro_gguf))
    loaded, loaded_tokenizer = load_target(cfg), load_tokenizer(cfg)
    for text in TOKENIZER_SAMPLE:
        assert loaded_tokenizer.encode(text) == tokenizer.encode(text)
    ids = tokenizer.encode(TOKENIZER_SAMPLE[1])
    assert torch.equal(_logits(loaded, ids), _logits(target, ids))
    assert loaded_tokenizer.chat_template == tokenizer.chat_template and len(loaded_tokenizer) == len(tokenizer)
    assert loaded.generation_config.eos_token_id == target.generation_config.eos_token_id
    assert target_config(cfg).num_hidden_layers == target.config.num_hidden_layers


def test_a_quantized_gguf_is_dequantized_once_keyed_by_its_content(
    micro_world, target, tokenizer, tmp_path, capsys, monkeypatch
):
    """Q8_0 loads within its quantization error; a second use reuses the directory; another file's bytes (rewritten
    in place, same name) get another directory, never the old weights."""
    monkeypatch.setenv("DRAFTHUB_CACHE", str(tmp_path / "cache"))
    file = write_gguf(micro_world.target_dir, tmp_path / "micro.gguf", qtype=Q8_0)
    cfg = TargetConfig(name_or_path=str(file))
    assert resolve_built_target(cfg) is None
    directory = Path(resolve_target(cfg))
    assert "dequantizing micro.gguf" in capsys.readouterr().out
    record = json.loads((directory / GGUF_SOURCE).read_text())
    assert record["gguf"] == str(file.resolve()) and "Q8_0" in record["tensor_types"]
    ids = tokenizer.encode(TOKENIZER_SAMPLE[1])
    error = (_logits(load_target(cfg), ids) - _logits(target, ids)).abs().max().item()
    assert 0 < error < 0.5
    assert resolve_target(cfg) == str(directory) == resolve_built_target(cfg)
    assert "dequantizing" not in capsys.readouterr().out
    write_gguf(micro_world.target_dir, file)  # the same name, now F32
    assert resolve_target(cfg) != str(directory)


def test_a_gguf_file_is_named_by_its_directory_or_hub_repo_with_gguf_file(micro_gguf, tmp_path, monkeypatch):
    """`target.gguf_file` inside a local directory, or inside a Hub repo (here the HF cache, offline), is the same
    target as the file's path."""
    by_path = resolve_target(TargetConfig(name_or_path=str(micro_gguf)))
    in_dir = TargetConfig(name_or_path=str(micro_gguf.parent), gguf_file=micro_gguf.name)
    assert resolve_target(in_dir) == by_path
    cache, repo = tmp_path / "hf", "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
    snapshot = cache / f"models--{repo.replace('/', '--')}" / "snapshots" / ("c" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "model.gguf").write_bytes(micro_gguf.read_bytes())
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("c" * 40)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    assert resolve_target(TargetConfig(name_or_path=repo, gguf_file="model.gguf")) == by_path
    with pytest.raises(DistillError, match=r"could not fetch other\.gguf from the Hub repo .*target\.gguf_file"):
        resolve_target(TargetConfig(name_or_path=repo, gguf_file="other.gguf"))


def _unsupported_quantization(micro_world, out: Path) -> Path:
    """The micro model with its embedding stored as Q8_1, a type llama.cpp has and the gguf package cannot read."""
    write_gguf(micro_world.target_dir, out)
    reader = gguf.GGUFReader(out)
    writer = gguf.GGUFWriter(str(out.with_suffix(".q81.gguf")), "llama")
    for field in reader.fields.values():
        if not field.name.startswith("GGUF.") and field.name != "general.architecture":
            writer.add_key_value(field.name, field.contents(), field.types[0], field.types[-1])
    for tensor in reader.tensors:
        if tensor.name == "token_embd.weight":
            rows, width = tensor.data.shape
            values, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q8_1]
            blocks = np.zeros((rows, width // values * size), dtype=np.uint8)
            writer.add_tensor(tensor.name, blocks, raw_dtype=gguf.GGMLQuantizationType.Q8_1)
        else:
            writer.add_tensor(tensor.name, np.array(tensor.data))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out.with_suffix(".q81.gguf")


@pytest.mark.parametrize("problem", ["architecture", "quantization", "not a GGUF", "missing"])
def test_a_gguf_transformers_cannot_load_is_refused_in_one_line_before_any_weights(problem, micro_world, tmp_path):
    if problem == "architecture":
        file = write_gguf(micro_world.target_dir, tmp_path / "m.gguf", architecture="rwkv7")
        expected = r"architecture 'rwkv7', which transformers cannot load .*Hugging Face directory instead"
    elif problem == "quantization":
        file = _unsupported_quantization(micro_world, tmp_path / "m.gguf")
        expected = r"holds Q8_1 tensors \(token_embd\.weight\), which transformers cannot dequantize; requantize"
    elif problem == "not a GGUF":
        file = tmp_path / "m.gguf"
        file.write_bytes(write_gguf(micro_world.target_dir, tmp_path / "whole.gguf").read_bytes()[:4096])
        expected = r"is not a readable GGUF file \(.*\); download it again"
    else:
        file, expected = tmp_path / "nowhere.gguf", r"target GGUF .*nowhere\.gguf does not exist"
    converted = set((cache_root() / "targets").glob("gguf-*"))
    for attempt in (resolve_target, target_config):
        with pytest.raises(DistillError, match=expected) as refused:
            attempt(TargetConfig(name_or_path=str(file)))
        assert "\n" not in str(refused.value)
    assert set((cache_root() / "targets").glob("gguf-*")) == converted  # nothing written


def test_a_pre_tokenizer_transformers_does_not_map_is_read_as_llama_cpp_reads_it(micro_world, tmp_path):
    """SmolLM2's GGUF says `smollm` (every digit alone): transformers alone would split by GPT-2's rule and merge
    the digits "12" into one token; drafthub's rule keeps them apart, as llama.cpp and SmolLM2's tokenizer.json do."""
    file = write_gguf(micro_world.target_dir, tmp_path / "m.gguf", pre="smollm", extra_merges=(("1", "2"),))
    tokenizer = load_tokenizer(TargetConfig(name_or_path=str(file)))
    one, two = tokenizer.convert_tokens_to_ids(["12"])[0], tokenizer.convert_tokens_to_ids(["1", "2"])
    assert tokenizer.encode("x = 12", add_special_tokens=False)[-2:] == two and one not in tokenizer.encode("x = 12")
    plain = write_gguf(micro_world.target_dir, tmp_path / "plain.gguf", pre="gpt-2", extra_merges=(("1", "2"),))
    assert one in load_tokenizer(TargetConfig(name_or_path=str(plain))).encode("x = 12")  # the merge is real


def test_llama_cpp_is_given_the_original_gguf_as_the_target(micro_world, tmp_path, capsys):
    """The directory records its GGUF: llama-server serves that file, quantized as the user has it; a copy with the
    same bytes resolved later takes over the record; with the recorded file gone, the directory converted back."""
    from heads.formats import llamacpp

    (tmp_path / "a").mkdir()
    first = write_gguf(micro_world.target_dir, tmp_path / "a" / "m.gguf", qtype=Q8_0)
    directory = Path(resolve_target(str(first)))
    assert llamacpp.target.target_gguf(directory, tmp_path / "converted") == first.resolve()
    second = tmp_path / "b" / "m.gguf"
    second.parent.mkdir()
    second.write_bytes(first.read_bytes())
    first.unlink()
    assert resolve_target(str(second)) == str(directory)
    assert llamacpp.target.source_gguf(directory) == second.resolve()
    second.unlink()
    assert llamacpp.target.source_gguf(directory) is None
    assert "is gone or changed: llama-server serves the dequantized weights converted back" in capsys.readouterr().err


def test_the_header_answers_before_any_weights_and_is_read_once(micro_world, tmp_path, monkeypatch):
    """What the file declares (template, special ids, tensor types, the transformers config) comes from its header
    alone; the record is kept by digest, so the next read parses nothing; no directory is dequantized."""
    from transformers import AutoConfig

    from distill.targets import declared_tokenizer
    from distill.targets.gguf_header import read_header

    monkeypatch.setenv("DRAFTHUB_CACHE", str(tmp_path / "cache"))
    file = write_gguf(micro_world.target_dir, tmp_path / "micro.gguf", qtype=Q8_0)
    header = read_header(file)
    assert header.architecture == "llama" and header.tensor_types == ["F32", "Q8_0"]
    assert header.vocabulary == json.loads((micro_world.target_dir / "config.json").read_text())["vocab_size"]
    theirs = AutoConfig.from_pretrained(str(tmp_path), gguf_file=file.name).to_dict()
    ours = header.model_config().to_dict()
    assert {k: v for k, v in ours.items() if k != "_name_or_path"} == {
        k: v for k, v in theirs.items() if k != "_name_or_path"
    }
    monkeypatch.setattr(gguf, "GGUFReader", lambda *a, **k: pytest.fail("parsed the header again"))
    declared = declared_tokenizer(TargetConfig(name_or_path=str(file)))
    assert declared["chat_template"] == (micro_world.target_dir / "chat_template.jinja").read_text()
    assert declared["special_ids"]["eos"] == header.special_ids["eos"]
    assert target_config(TargetConfig(name_or_path=str(file))).num_hidden_layers == ours["num_hidden_layers"]
    assert not [p for p in (tmp_path / "cache" / "targets").glob("gguf-*") if p.is_dir()]  # nothing dequantized


def test_a_base_models_gguf_plans_with_a_template_file_and_the_run_keeps_its_text(micro_world, tmp_path, monkeypatch):
    """A GGUF declaring no template runs once given one as a file: the run's settings (hashed, recorded) hold the
    template's text, not its path; a missing file is one line."""
    from hydra import compose, initialize_config_module

    from distill.prompts.chat import template_text
    from train.config import register_configs
    from train.pipeline import run_pipeline

    monkeypatch.setenv("DRAFTHUB_CACHE", str(tmp_path / "cache"))
    base = write_gguf(micro_world.target_dir, tmp_path / "base.gguf", chat_template=False)
    text = (micro_world.target_dir / "chat_template.jinja").read_text()
    (tmp_path / "chat.jinja").write_text(text)
    register_configs()
    overrides = [f"target.name_or_path={base}", f"target.chat_template={tmp_path / 'chat.jinja'}", "dry_run=true"]
    with initialize_config_module(config_module="conf", version_base=None):
        cfg = compose("config", overrides=["recipe=toy", *overrides])
    assert run_pipeline(cfg)["plan"]["fits"] and cfg.target.chat_template == text
    assert template_text(text) == text and template_text(None) is None
    with pytest.raises(DistillError, match=r"none\.jinja: no such file, and no Jinja template either"):
        template_text(str(tmp_path / "none.jinja"))
