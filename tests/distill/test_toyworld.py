import json
from dataclasses import replace

import pytest
import torch
from transformers import AutoConfig, LlamaForCausalLM

from distill.toyworld import build, load_world, target
from distill.toyworld.build import TrainingData, _chat_stream
from distill.toyworld.config import CHAT, MICRO, TOY
from distill.toyworld.target import _windows, lr_factor, target_config, train_target


def test_micro_world_is_cached_and_complete(micro_world):
    again = load_world("micro")
    assert again.root == micro_world.root  # same key: built once, reused
    info = micro_world.info
    assert info["parameters"] > 0 and info["heldout_loss"] < 6.0  # learnt something (uniform = ln 512 = 6.24)
    cfg = AutoConfig.from_pretrained(micro_world.target_dir)
    assert cfg.hidden_size // cfg.num_attention_heads >= 32  # vLLM's CPU attention needs head_dim >= 32
    for split in ("train", "heldout"):
        rows = [json.loads(line) for line in micro_world.prompts_file(split).read_text().splitlines()]
        assert rows and all(r["messages"][0]["role"] == "user" for r in rows)
    assert not list(micro_world.root.parent.glob(f".{micro_world.root.name}-*"))  # no temp dirs left


def test_chat_template_has_generation_markers(tokenizer):
    assert "{% generation %}" in tokenizer.chat_template
    assert tokenizer.eos_token == "<|end|>" and tokenizer.pad_token == "<|pad|>"


def test_world_keys_ignore_new_fields_at_their_defaults():
    """A knob added to the builder must not rebuild the worlds users already cached (the toy world takes ~18 min)."""
    assert TOY.key_fields() == {k: v for k, v in TOY.as_dict().items() if k in _V2_FIELDS}
    assert replace(TOY, schedule="wsd").key_fields()["schedule"] == "wsd"  # a changed knob does count


_V2_FIELDS = {
    *"name corpus_bytes vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads".split(),
    *"seq_len batch_size train_steps lr chat_fraction num_chat_docs num_prompts num_train_prompts seed".split(),
}


def test_warmup_stable_decay_schedule():
    """wsd: a linear warm-up, the full rate until the last decay_fraction of the steps, then linearly to zero."""
    f = lr_factor(replace(TOY, train_steps=100, warmup_steps=10, schedule="wsd", decay_fraction=0.2))
    assert [f(s) for s in (0, 9, 10, 50, 80)] == [0.1, 1.0, 1.0, 1.0, 1.0]
    assert f(90) == pytest.approx(0.5) and f(99) == pytest.approx(0.05)
    constant = lr_factor(replace(TOY, train_steps=100, warmup_steps=10, schedule="wsd", decay_fraction=0))
    assert [constant(s) for s in (4, 10, 99)] == [0.5, 1.0, 1.0]
    cosine = lr_factor(replace(TOY, train_steps=100))  # the toy world's: warm-up train_steps // 20, then cosine
    assert cosine(0) == pytest.approx(0.2) and cosine(50) == pytest.approx(0.5) and cosine(99) < 0.001
    with pytest.raises(ValueError, match="schedule 'linear'"):
        lr_factor(replace(TOY, schedule="linear"))


def test_compile_failure_falls_back_to_eager(monkeypatch, capsys):
    """No C++ compiler on the user's machine: the target still trains, eagerly, and says so once."""

    def broken_compile(fn):
        def run(*args):
            raise RuntimeError("no compiler")

        return run

    monkeypatch.setattr(torch, "compile", broken_compile)
    cfg = replace(MICRO, train_steps=3, batch_size=2, seq_len=16, compile=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(target_config(cfg))
    before = [p.detach().clone() for p in model.parameters()]
    stream = torch.randint(2, cfg.vocab_size, (200,))
    stats = train_target(model, cfg, stream, stream)
    assert capsys.readouterr().out.count("torch.compile failed (RuntimeError); training eagerly") == 1
    assert stats["train_tokens"] == 3 * 2 * 16
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_document_windows_start_where_a_chat_document_starts(tokenizer):
    """chat_windows "documents": every chat training window opens on a request's first token, so the request an
    answer copies from is in the window; "random" keeps the older worlds' offsets (their keys unchanged)."""
    docs = [[{"role": "user", "content": "x" * n}, {"role": "assistant", "content": "y"}] for n in (3, 40, 7, 90, 5)]
    stream, starts = _chat_stream(tokenizer, docs)
    assert starts.tolist()[0] == 0 and len(starts) == len(docs)
    user = tokenizer.convert_tokens_to_ids("<|user|>")
    assert all(stream[s] == user for s in starts.tolist())
    windows = _windows(stream, 64, 8, torch.Generator().manual_seed(0), starts)
    assert all(w[0] == user for w in windows)  # random offsets would mostly land inside a document
    assert len({tuple(w.tolist()) for w in windows}) > 1  # drawn among the documents that leave a whole window
    assert TOY.key_fields().get("chat_windows") is None and CHAT.key_fields()["chat_windows"] == "documents"


def test_chat_windows_misconfigured_is_refused():
    model = LlamaForCausalLM(target_config(replace(MICRO, seq_len=16)))
    stream = torch.randint(2, MICRO.vocab_size, (200,))
    with pytest.raises(ValueError, match="chat_windows 'middle' is not 'random' or 'documents'"):
        train_target(model, replace(MICRO, chat_windows="middle"), stream, stream)
    with pytest.raises(ValueError, match="needs the chat documents' offsets"):
        train_target(model, replace(MICRO, chat_windows="documents"), stream, stream)


def _trained(cfg, monkeypatch, native: bool):
    monkeypatch.setattr(target, "native_bf16", lambda device: native)
    torch.manual_seed(0)
    model = LlamaForCausalLM(target_config(cfg))
    stats = train_target(model, cfg, torch.arange(2, 202) % cfg.vocab_size, torch.arange(3, 203) % cfg.vocab_size)
    return stats, [p.detach().clone() for p in model.parameters()]


def test_bf16_world_trains_in_fp32_where_bf16_is_emulated(monkeypatch, capsys):
    """A world that asks for bf16 (chat) on a CPU without AVX-512-BF16/AMX trains exactly as in fp32 (emulated bf16
    was ~10x slower than fp32 on an AVX2 EPYC: a 12-hour build), says so in one line and records it in world.json."""
    cfg = replace(MICRO, train_steps=3, batch_size=2, seq_len=16)
    fp32_stats, fp32 = _trained(cfg, monkeypatch, native=True)  # bf16 not asked for: fp32 whatever the CPU
    fallback_stats, fallback = _trained(replace(cfg, bf16=True), monkeypatch, native=False)
    out = capsys.readouterr().out
    assert out.count("asks for bf16 autocast, but this cpu has no native bf16") == 1
    assert fp32_stats["train_precision"] == fallback_stats["train_precision"] == "fp32"
    assert all(torch.equal(a, b) for a, b in zip(fp32, fallback))
    native_stats, native = _trained(replace(cfg, bf16=True), monkeypatch, native=True)
    assert native_stats["train_precision"] == "bf16" and "no native bf16" not in capsys.readouterr().out
    assert any(not torch.equal(a, b) for a, b in zip(fp32, native))  # autocast did change the numerics


def test_world_model_trains_where_the_accelerator_is_and_comes_back_to_the_cpu(monkeypatch):
    """A world's model trains on `default_device()` (an H100 builds the chat world in 2 minutes) on the same
    CPU-drawn batches, so it trains exactly as `train_target` does there, and is left on the CPU to be saved."""
    cfg = replace(MICRO, train_steps=3, batch_size=2, seq_len=16)
    stream = torch.randint(2, cfg.vocab_size, (300,), generator=torch.Generator().manual_seed(0))
    data = TrainingData(None, stream, stream.flip(0), torch.tensor([0]), stream[:200], lambda doc: True)
    asked = []
    monkeypatch.setattr(build, "default_device", lambda: asked.append(1) or torch.device("cpu"))
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        models.append(LlamaForCausalLM(target_config(cfg)))
    stats, losses = build.train_world_model(models[0], cfg, data, {16, 8})
    reference = train_target(models[1], cfg, data.code, data.chat)
    assert asked == [1] and stats["train_device"] == "cpu" and stats["train_tokens"] == reference["train_tokens"]
    assert all(torch.equal(a, b) for a, b in zip(models[0].parameters(), models[1].parameters()))
    assert list(losses) == ["heldout_loss_8", "heldout_loss_16"] and all(0 < v < 10 for v in losses.values())
    assert next(models[0].parameters()).device.type == "cpu"
