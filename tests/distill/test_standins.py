"""The real-family stand-ins (tests/standins.py) reproduce the quirks drafthub must handle.

Each stand-in is checked as a user's real model would be loaded (AutoTokenizer, AutoModelForCausalLM,
GenerationConfig) against the real family's documented tokens, ids and chat format, written out literally here.
Run: `python -m pytest -q tests/distill/test_standins.py` (~10 s, builds each stand-in once).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

import pytest
import torch
from jinja2.exceptions import TemplateError
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from tests.standins import FAMILIES, STANDINS, build_standin

CHAT = ("llama3", "qwen2_5", "qwen3", "mistral", "gemma")
WITH_BOS = ("llama3", "mistral", "gemma")  # their templates write bos and their tokenizers prepend it
USER = [{"role": "user", "content": "Hello"}]
TURN = [*USER, {"role": "assistant", "content": "Hi there"}]

# USER rendered with add_generation_prompt=True, from the documented formats.
PROMPTS = {
    "llama3": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
    "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    "qwen2_5": "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "qwen3": "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "mistral": "<s>[INST] Hello [/INST]",
    "gemma": "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
}

# name: (bos, eos, pad, unk), the tokenizer's; None where the real one has none.
SPECIALS = {
    "llama3": ("<|begin_of_text|>", "<|eot_id|>", None, None),
    "qwen2_5": (None, "<|im_end|>", "<|endoftext|>", None),
    "qwen3": (None, "<|im_end|>", "<|endoftext|>", None),
    "mistral": ("<s>", "</s>", None, "<unk>"),
    "gemma": ("<bos>", "<eos>", "<pad>", "<unk>"),
    "gpt2": ("<|endoftext|>", "<|endoftext|>", None, "<|endoftext|>"),
}
# name: generation_config.json's stop tokens, in order.
STOPS = {
    "llama3": ["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"],
    "qwen2_5": ["<|im_end|>", "<|endoftext|>"],
    "qwen3": ["<|im_end|>", "<|endoftext|>"],
    "mistral": ["</s>"],
    "gemma": ["<eos>", "<end_of_turn>"],
    "gpt2": ["<|endoftext|>"],
}
ARCHITECTURES = {
    "llama3": "LlamaForCausalLM",
    "qwen2_5": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "mistral": "MistralForCausalLM",
    "gemma": "Gemma2ForCausalLM",
    "gpt2": "GPT2LMHeadModel",
}
RESERVED = {"llama3": "<|reserved_special_token_0|>", "qwen2_5": "<|vision_pad|>", "qwen3": "<|vision_pad|>"}
RESERVED |= {"gemma": "<unused0>", "mistral": None, "gpt2": None}


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny models on a shared 2-core machine: two torch threads make each forward ~100x slower under load."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@lru_cache(maxsize=None)
def _tokenizer(path: Path):
    return AutoTokenizer.from_pretrained(path)


def _ids(tok, *tokens: str) -> list[int]:
    return [tok.convert_tokens_to_ids(t) for t in tokens]


def _as_list(ids: int | list[int] | None) -> list[int]:
    return [ids] if isinstance(ids, int) else list(ids)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("name", STANDINS)
def test_loads_with_the_real_special_tokens(standin, name):
    built = standin(name)
    tok = _tokenizer(built.path)
    gen = GenerationConfig.from_pretrained(built.path)
    assert (tok.bos_token, tok.eos_token, tok.pad_token, tok.unk_token) == SPECIALS[name]
    assert _as_list(gen.eos_token_id) == _ids(tok, *STOPS[name])
    reserved = RESERVED[name]
    assert built.reserved_token_id == (None if reserved is None else tok.convert_tokens_to_ids(reserved))


@pytest.mark.parametrize("name", STANDINS)
def test_model_is_the_real_architecture(standin, name):
    built = standin(name)
    tok = _tokenizer(built.path)
    model = AutoModelForCausalLM.from_pretrained(built.path, use_safetensors=True)
    config = model.config
    assert type(model).__name__ == ARCHITECTURES[name]
    assert config.num_hidden_layers == built.num_hidden_layers
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    assert head_dim >= 32  # vLLM's CPU attention refuses smaller heads
    assert model.get_input_embeddings().weight.shape[0] == config.vocab_size
    if name.startswith("qwen"):  # Qwen pads its embedding matrix past the tokenizer
        assert config.vocab_size > len(tok)
    else:
        assert config.vocab_size == len(tok)


def test_llama3_quirks(standin):
    built = standin("llama3")
    tok = _tokenizer(built.path)
    config = AutoConfig.from_pretrained(built.path)
    assert tok.pad_token is None and tok.eos_token == "<|eot_id|>"
    assert config.eos_token_id == _ids(tok, "<|end_of_text|>", "<|eom_id|>", "<|eot_id|>")
    assert config.bos_token_id == tok.bos_token_id
    assert config.rope_parameters["rope_type"] == "llama3"
    # The specials follow the learned vocabulary, in the real order.
    real_order = [
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|reserved_special_token_0|>",
        "<|reserved_special_token_1|>",
        "<|finetune_right_pad_id|>",
        "<|reserved_special_token_2|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eom_id|>",
        "<|eot_id|>",
        "<|python_tag|>",
        "<|reserved_special_token_3|>",
    ]
    first = tok.bos_token_id
    assert _ids(tok, *real_order) == list(range(first, first + len(real_order)))
    assert max(tok.get_vocab().values()) == len(tok) - 1 == config.vocab_size - 1


def test_sentencepiece_layouts(standin):
    mistral = _tokenizer(standin("mistral").path)
    gemma = _tokenizer(standin("gemma").path)
    assert _ids(mistral, "<unk>", "<s>", "</s>") == [0, 1, 2]
    assert _ids(gemma, "<pad>", "<eos>", "<bos>", "<unk>", "<unused0>") == [0, 1, 2, 3, 6]
    assert _ids(gemma, "<start_of_turn>", "<end_of_turn>") == [106, 107]
    gen = GenerationConfig.from_pretrained(standin("gemma").path)
    assert (gen.bos_token_id, gen.pad_token_id) == (2, 0)


@pytest.mark.parametrize("name", STANDINS)
def test_special_tokens_are_single_tokens(standin, name):
    tok = _tokenizer(standin(name).path)
    spec = FAMILIES[name].tokens
    for token in (*spec.leading, *spec.trailing, *spec.plain):
        token_id = tok.convert_tokens_to_ids(token)
        assert tok.get_vocab()[token] == token_id < len(tok)
        assert tok.encode(f"x{token}y", add_special_tokens=False).count(token_id) == 1, token


@pytest.mark.parametrize("name", CHAT)
def test_renders_the_documented_prompt(standin, name):
    tok = _tokenizer(standin(name).path)
    assert tok.apply_chat_template(USER, add_generation_prompt=True, tokenize=False) == PROMPTS[name]
    ids = tok.apply_chat_template(USER, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert ids == tok.encode(PROMPTS[name], add_special_tokens=False)
    if name in WITH_BOS:  # the template writes bos; apply_chat_template must not add a second one
        assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1
    else:
        assert tok.bos_token_id is None and ids[0] == tok.convert_tokens_to_ids("<|im_start|>")


@pytest.mark.parametrize("name", STANDINS)
def test_plain_encode_adds_bos_where_the_real_one_does(standin, name):
    tok = _tokenizer(standin(name).path)
    ids = tok("Hello")["input_ids"]
    if name in WITH_BOS:
        assert ids[0] == tok.bos_token_id
        # The trap: encoding a rendered chat as plain text doubles bos.
        assert tok(PROMPTS[name])["input_ids"][:2] == [tok.bos_token_id] * 2
    else:
        assert tok.bos_token_id not in ids


@pytest.mark.parametrize(
    ("name", "message"),
    [("mistral", "Conversation roles must alternate"), ("gemma", "System role not supported")],
)
def test_system_message_raises(standin, name, message):
    tok = _tokenizer(standin(name).path)
    with pytest.raises(TemplateError, match=message):
        tok.apply_chat_template([{"role": "system", "content": "Be brief."}, *USER], tokenize=False)
    with pytest.raises(TemplateError, match="Conversation roles must alternate"):
        tok.apply_chat_template([*USER, *USER], tokenize=False)


@pytest.mark.parametrize(
    ("name", "rendered"),
    [
        ("mistral", "<s>[INST] Hello [/INST]Hi there</s>"),
        ("gemma", "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\nHi there<end_of_turn>\n"),
        ("qwen2_5", PROMPTS["qwen2_5"] + "Hi there<|im_end|>\n"),
        ("qwen3", PROMPTS["qwen3"] + "<think>\n\n</think>\n\nHi there<|im_end|>\n"),
        ("llama3", PROMPTS["llama3"] + "Hi there<|eot_id|>"),
    ],
)
def test_renders_the_documented_conversation(standin, name, rendered):
    tok = _tokenizer(standin(name).path)
    assert tok.apply_chat_template(TURN, tokenize=False) == rendered


def test_qwen_system_prompts(standin):
    qwen2_5 = _tokenizer(standin("qwen2_5").path)
    qwen3 = _tokenizer(standin("qwen3").path)
    custom = [{"role": "system", "content": "Be brief."}, *USER]
    rendered = qwen2_5.apply_chat_template(custom, add_generation_prompt=True, tokenize=False)
    assert rendered.startswith("<|im_start|>system\nBe brief.<|im_end|>\n") and "Alibaba" not in rendered
    assert "system" not in qwen3.apply_chat_template(USER, tokenize=False)  # no default system message


def test_qwen3_thinking(standin):
    tok = _tokenizer(standin("qwen3").path)
    prompt = tok.apply_chat_template(USER, add_generation_prompt=True, tokenize=False, enable_thinking=False)
    assert prompt == PROMPTS["qwen3"] + "<think>\n\n</think>\n\n"
    # Earlier assistant turns lose their reasoning; the last keeps it.
    turns = [*USER, {"role": "assistant", "content": "<think>r1</think>a1"}, *USER]
    turns.append({"role": "assistant", "content": "<think>\nr2\n</think>\n\na2"})
    rendered = tok.apply_chat_template(turns, tokenize=False)
    assert "r1" not in rendered and "<|im_start|>assistant\na1<|im_end|>" in rendered
    assert rendered.endswith("<|im_start|>assistant\n<think>\nr2\n</think>\n\na2<|im_end|>\n")
    # <think> is an added token but not a special one: skip_special_tokens keeps it.
    ids = tok.encode("<think>x</think><|im_end|>", add_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=True) == "<think>x</think>"


def test_llama3_trims_contents(standin):
    tok = _tokenizer(standin("llama3").path)
    messages = [{"role": "user", "content": "  Hello \n"}]
    assert tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) == PROMPTS["llama3"]


def test_mistral_encodes_with_a_dummy_prefix_space(standin):
    tok = _tokenizer(standin("mistral").path)
    ids = tok.encode("Hello", add_special_tokens=False)
    assert tok.convert_ids_to_tokens(ids)[0].startswith("Ġ")  # sentencepiece's "▁Hello"
    assert tok.decode(ids) == "Hello"
    # Not concatenation-stable, as the real one: "!" alone is encoded as " !".
    assert ids + tok.encode("!", add_special_tokens=False) != tok.encode("Hello!", add_special_tokens=False)


def test_gpt2_has_no_chat_template(standin):
    tok = _tokenizer(standin("gpt2").path)
    assert tok.chat_template is None
    with pytest.raises(ValueError, match="chat_template"):
        tok.apply_chat_template(USER, tokenize=False)


@pytest.mark.parametrize("name", CHAT)
def test_templates_have_no_generation_markers(standin, name):
    tok = _tokenizer(standin(name).path)
    encoded = tok.apply_chat_template(TURN, return_assistant_tokens_mask=True, return_dict=True)
    assert not any(encoded["assistant_masks"])  # the pipeline must find assistant spans itself


@pytest.mark.parametrize("name", STANDINS)
def test_greedy_continuation_varies(standin, name):
    path = standin(name).path
    tok = _tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(path, use_safetensors=True).eval()
    if tok.chat_template:
        ids = tok.apply_chat_template(USER, add_generation_prompt=True, return_dict=False)
    else:
        ids = tok.encode("def main():\n    return")
    tokens = torch.tensor([ids])
    with torch.no_grad():
        for _ in range(32):  # plain argmax: the generation configs sample by default (and Qwen2.5 penalises)
            next_token = model(tokens).logits[0, -1].argmax()
            tokens = torch.cat([tokens, next_token.view(1, 1)], dim=1)
    assert len(set(tokens[0, len(ids) :].tolist())) >= 8


@pytest.mark.parametrize("name", STANDINS)
def test_build_is_idempotent_and_deterministic(standin, tmp_path, name):
    first = build_standin(name, tmp_path)
    stamp = (first.path / "model.safetensors").stat().st_mtime_ns
    assert build_standin(name, tmp_path) == first
    assert (first.path / "model.safetensors").stat().st_mtime_ns == stamp  # reused, not rebuilt
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no temporary directories left behind
    other = standin(name).path  # built in another root
    for file in ("model.safetensors", "tokenizer.json", "config.json", "generation_config.json"):
        assert _sha256(first.path / file) == _sha256(other / file), file


def test_incomplete_build_is_replaced(tmp_path):
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text("{}")  # a crashed build: no completion marker
    built = build_standin("gpt2", tmp_path)
    assert AutoConfig.from_pretrained(built.path).model_type == "gpt2"


def test_unknown_name_is_refused(tmp_path):
    with pytest.raises(ValueError, match="known: llama3"):
        build_standin("llama2", tmp_path)
