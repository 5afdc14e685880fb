"""Tiny local stand-ins for real target families, built by the tests (no downloads).

drafthub must work on users' real targets, and their tokenizers and configs differ in ways that break naive
code: Llama-3 has no pad token and three stop ids, Qwen has no bos token and pads its embedding matrix past the
tokenizer, Qwen3 adds an empty think block to the last assistant turn, Mistral and Gemma refuse system messages,
Gemma renames the assistant role, GPT-2 ships no chat template at all, and none of them marks assistant spans
with `{% generation %}`. `build_standin(name, root)` writes `root/name`, a local HF model directory for one
family: a random tiny model of the real architecture class (head_dim >= 32, as vLLM's CPU attention needs) and
a byte-level BPE tokenizer, trained in ~0.1 s on the interpreter's stdlib sources, whose special tokens, id
layout, bos/eos/pad, chat template and generation config reproduce the real family's. The templates are written
here from the families' documented chat formats; tool calling is left out.

    from tests.standins import build_standin
    qwen3 = build_standin("qwen3", tmp_path)   # StandIn(path=tmp_path / "qwen3", ...)

Tests get them through the session fixture `standin` (tests/conftest.py): `standin("llama3").path`.
"""

from __future__ import annotations

import json
import os
import shutil
import sysconfig
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    Gemma2Config,
    GenerationConfig,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    PretrainedConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen3Config,
)

STANDINS: tuple[str, ...] = ("llama3", "qwen2_5", "qwen3", "mistral", "gemma", "gpt2")

_VERSION = 1  # bump when a stand-in changes, so a directory built by an older builder is rebuilt
_MARKER = "standin.json"  # written last: its presence means the directory is complete
_SEED = 0
_BPE_VOCAB = 1280  # learned vocabulary (byte alphabet + merges), before the family's special tokens
_CORPUS_CHARS = 400_000  # ~0.1 s of BPE training
_EMBED_STD = 0.02  # the real init std, kept for embeddings
_INIT_STD = 0.15  # every other matrix: large, so the random model's greedy output does not repeat one token
_MAX_POSITIONS = 2048

# Pre-tokenizer split patterns of the real tokenizer.json files: Llama-3 groups digits by three, Qwen splits each.
_SPLIT_WORDS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
_SPLIT_REST = r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_LLAMA3_SPLIT = _SPLIT_WORDS + r"\p{N}{1,3}" + _SPLIT_REST
_QWEN_SPLIT = _SPLIT_WORDS + r"\p{N}" + _SPLIT_REST

# --- chat templates, written from the documented formats (tools omitted) ---

# Llama-3.1/3.3 Instruct: a system block is always written, with the knowledge and today dates before any
# system text; contents are trimmed.
LLAMA3_TEMPLATE = r"""{{- bos_token }}
{%- if not date_string is defined %}{%- set date_string = "26 Jul 2024" %}{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}"""

QWEN2_5_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

# Qwen2.5 Instruct: ChatML, with a default system message when the conversation has none.
QWEN2_5_TEMPLATE = r"""{%- if messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
{%- else %}
    {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message['role'] != 'system' or not loop.first %}
        {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}"""

# Qwen3: ChatML without a default system message. Assistant turns after the last user query carry a think block
# (empty when there is no reasoning, so the final turn always gets `<think>\n\n</think>\n\n`); earlier turns
# lose theirs. `enable_thinking=False` writes the empty block into the generation prompt.
QWEN3_TEMPLATE = r"""{%- if messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(last_query_index=messages|length - 1) %}
{%- for message in messages %}
    {%- if message['role'] == 'user' %}{%- set ns.last_query_index = loop.index0 %}{%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = message['content'] if message['content'] is string else '' %}
    {%- if message['role'] == 'user' or (message['role'] == 'system' and not loop.first) %}
        {{- '<|im_start|>' + message['role'] + '\n' + content + '<|im_end|>\n' }}
    {%- elif message['role'] == 'assistant' %}
        {%- set reasoning_content = message['reasoning_content'] if message['reasoning_content'] is string else '' %}
        {%- if '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}
            {{- '<|im_start|>assistant\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' }}
            {{- content.lstrip('\n') }}
        {%- else %}
            {{- '<|im_start|>assistant\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"""

_ALTERNATE = "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"

# Mistral-7B-Instruct v0.1/v0.2: bos, then [INST] turns; strictly alternating user/assistant, no system role;
# add_generation_prompt changes nothing.
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}" + _ALTERNATE + "{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}"
    "{% endfor %}"
)

# Gemma-2 "it": bos, turns with the assistant renamed `model`, contents trimmed, no system role.
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}" + _ALTERNATE + "{% endif %}"
    "{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)

# --- special tokens, in the real order ---

_LLAMA3_SPECIALS = (
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
    *(f"<|reserved_special_token_{i}|>" for i in range(3, 24)),  # the real list runs to 247 (256 specials)
)
_QWEN_SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
# Added after the specials but not special themselves (decode(skip_special_tokens=True) keeps them).
_QWEN2_5_PLAIN = (
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
)
_QWEN3_PLAIN = (*_QWEN2_5_PLAIN, "<tool_response>", "</tool_response>", "<think>", "</think>")
# Gemma's sentencepiece layout: ids 0-5, <unused0..99> at 6-105, then the turn markers at 106/107.
_GEMMA_SPECIALS = (
    "<pad>",
    "<eos>",
    "<bos>",
    "<unk>",
    "<mask>",
    "[@BOS@]",
    *(f"<unused{i}>" for i in range(100)),
    "<start_of_turn>",
    "<end_of_turn>",
)


@dataclass(frozen=True)
class StandIn:
    """A built stand-in: a local HF model directory reproducing one real family's tokenizer and config quirks."""

    name: str  # one of STANDINS
    path: Path  # config.json, model.safetensors, generation_config.json, tokenizer files
    reserved_token_id: int | None  # a special token never in real text, or None where the family has none
    num_hidden_layers: int  # GPT-2's config calls it n_layer


@dataclass(frozen=True)
class _Tokens:
    """What a family's tokenizer looks like: special tokens, id layout, pre-tokenizer and chat template."""

    leading: tuple[str, ...] = ()  # special tokens at ids 0.. (sentencepiece layout)
    trailing: tuple[str, ...] = ()  # special tokens appended after the learned vocabulary (tiktoken layout)
    plain: tuple[str, ...] = ()  # added tokens after those, not special
    bos: str | None = None
    eos: str | None = None
    pad: str | None = None
    unk: str | None = None
    add_bos_token: bool = False  # the post-processor prepends bos on plain encode
    split: str | None = None  # pre-tokenizer regex; None: GPT-2's ByteLevel regex
    prefix_space: bool = False  # sentencepiece's dummy prefix: each text segment starts with a space
    nfc: bool = False  # Qwen normalises to NFC
    chat_template: str | None = None
    reserved: str | None = None  # StandIn.reserved_token_id
    max_length: int = _MAX_POSITIONS


@dataclass(frozen=True)
class _Family:
    tokens: _Tokens
    config: Callable[[PreTrainedTokenizerFast], PretrainedConfig]  # the model config, given the tokenizer
    generation: Callable[[Callable[[str], int]], dict]  # generation_config.json, given token -> id


def _ids(tok: PreTrainedTokenizerFast, *tokens: str) -> list[int]:
    return [tok.convert_tokens_to_ids(t) for t in tokens]


def _padded(n: int) -> int:
    """Qwen's embedding matrix is larger than its tokenizer (151936 or 152064 rows for 151665 tokens)."""
    return (n // 256 + 1) * 256


def _llama3_config(tok: PreTrainedTokenizerFast) -> PretrainedConfig:
    return LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,  # grouped-query attention, as the real 8B (32 heads, 8 kv heads)
        max_position_embeddings=_MAX_POSITIONS,
        rms_norm_eps=1e-5,
        # Llama-3.1's rope scaling, shrunk with the context: 8 x 256 original positions.
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": _MAX_POSITIONS // 8,
        },
        bos_token_id=tok.bos_token_id,
        eos_token_id=_ids(tok, "<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"),
        tie_word_embeddings=False,
        dtype="float32",
    )


def _qwen2_5_config(tok: PreTrainedTokenizerFast) -> PretrainedConfig:
    return Qwen2Config(
        vocab_size=_padded(len(tok)),
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=_MAX_POSITIONS,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        use_sliding_window=False,
        bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),  # set in config.json though the tokenizer has none
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        tie_word_embeddings=True,  # as the 0.5B-3B models
        dtype="float32",
    )


def _qwen3_config(tok: PreTrainedTokenizerFast) -> PretrainedConfig:
    return Qwen3Config(
        vocab_size=_padded(len(tok)),
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=_MAX_POSITIONS,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        use_sliding_window=False,
        bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        tie_word_embeddings=True,  # as the 0.6B-4B models
        dtype="float32",
    )


def _mistral_config(tok: PreTrainedTokenizerFast) -> PretrainedConfig:
    return MistralConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=_MAX_POSITIONS,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},  # v0.2
        sliding_window=None,  # v0.2 dropped v0.1's 4096-token window
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=False,
        dtype="float32",
    )


def _gemma_config(tok: PreTrainedTokenizerFast) -> PretrainedConfig:
    return Gemma2Config(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,  # alternating sliding-window and global attention layers
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,  # heads x head_dim (128) != hidden_size (64), as in the real 2B (8 x 256 vs 2304)
        query_pre_attn_scalar=64,
        max_position_embeddings=_MAX_POSITIONS,
        sliding_window=_MAX_POSITIONS // 2,
        final_logit_softcapping=30.0,
        attn_logit_softcapping=50.0,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=_ids(tok, "<eos>", "<end_of_turn>"),
        tie_word_embeddings=True,
        dtype="float32",
    )


def _gpt2_config(tok: PreTrainedTokenizerFast) -> PretrainedConfig:
    return GPT2Config(
        vocab_size=len(tok),
        n_positions=1024,
        n_embd=64,
        n_layer=2,
        n_head=2,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        dtype="float32",
    )


FAMILIES: dict[str, _Family] = {
    "llama3": _Family(
        _Tokens(
            trailing=_LLAMA3_SPECIALS,
            bos="<|begin_of_text|>",
            eos="<|eot_id|>",  # the Instruct tokenizer_config's; generation stops on three ids
            add_bos_token=True,
            split=_LLAMA3_SPLIT,
            chat_template=LLAMA3_TEMPLATE,
            reserved="<|reserved_special_token_0|>",
        ),
        _llama3_config,
        # Llama-3.1-8B-Instruct's generation_config.json samples by default.
        lambda i: {
            "bos_token_id": i("<|begin_of_text|>"),
            "eos_token_id": [i("<|end_of_text|>"), i("<|eom_id|>"), i("<|eot_id|>")],
            "do_sample": True,
            "temperature": 0.6,
            "top_p": 0.9,
        },
    ),
    "qwen2_5": _Family(
        _Tokens(
            trailing=_QWEN_SPECIALS,
            plain=_QWEN2_5_PLAIN,
            eos="<|im_end|>",
            pad="<|endoftext|>",
            split=_QWEN_SPLIT,
            nfc=True,
            chat_template=QWEN2_5_TEMPLATE,
            reserved="<|vision_pad|>",  # a text-only Qwen never sees the vision tokens
        ),
        _qwen2_5_config,
        # Qwen2.5-Instruct samples by default, with a repetition penalty.
        lambda i: {
            "bos_token_id": i("<|endoftext|>"),
            "pad_token_id": i("<|endoftext|>"),
            "eos_token_id": [i("<|im_end|>"), i("<|endoftext|>")],
            "do_sample": True,
            "temperature": 0.7,
            "top_p": 0.8,
            "top_k": 20,
            "repetition_penalty": 1.05,
        },
    ),
    "qwen3": _Family(
        _Tokens(
            trailing=_QWEN_SPECIALS,
            plain=_QWEN3_PLAIN,
            eos="<|im_end|>",
            pad="<|endoftext|>",
            split=_QWEN_SPLIT,
            nfc=True,
            chat_template=QWEN3_TEMPLATE,
            reserved="<|vision_pad|>",
        ),
        _qwen3_config,
        lambda i: {
            "bos_token_id": i("<|endoftext|>"),
            "pad_token_id": i("<|endoftext|>"),
            "eos_token_id": [i("<|im_end|>"), i("<|endoftext|>")],
            "do_sample": True,
            "temperature": 0.6,
            "top_p": 0.95,
            "top_k": 20,
        },
    ),
    "mistral": _Family(
        _Tokens(
            leading=("<unk>", "<s>", "</s>"),
            bos="<s>",
            eos="</s>",
            unk="<unk>",
            add_bos_token=True,
            prefix_space=True,
            chat_template=MISTRAL_TEMPLATE,
        ),
        _mistral_config,
        lambda i: {"bos_token_id": i("<s>"), "eos_token_id": i("</s>")},
    ),
    "gemma": _Family(
        _Tokens(
            leading=_GEMMA_SPECIALS,
            bos="<bos>",
            eos="<eos>",
            pad="<pad>",
            unk="<unk>",
            add_bos_token=True,
            chat_template=GEMMA_TEMPLATE,
            reserved="<unused0>",
        ),
        _gemma_config,
        lambda i: {
            "bos_token_id": i("<bos>"),
            "eos_token_id": [i("<eos>"), i("<end_of_turn>")],
            "pad_token_id": i("<pad>"),
        },
    ),
    "gpt2": _Family(
        _Tokens(
            trailing=("<|endoftext|>",),
            bos="<|endoftext|>",
            eos="<|endoftext|>",
            unk="<|endoftext|>",
            max_length=1024,
        ),
        _gpt2_config,
        lambda i: {"bos_token_id": i("<|endoftext|>"), "eos_token_id": i("<|endoftext|>")},
    ),
}
assert tuple(FAMILIES) == STANDINS


def build_standin(name: str, root: Path) -> StandIn:
    """Build stand-in `name` into `root/name`, or reuse it there if a complete build of this version exists.

    The directory is written in a temporary sibling and renamed into place, so a reader never sees half of it.
    Builds are deterministic: the same name gives the same weights (seeded) and tokenizer.
    """
    if name not in FAMILIES:
        raise ValueError(f"unknown stand-in {name!r}; known: {', '.join(STANDINS)}")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / name
    if _read_marker(final) is None:
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
        tmp.chmod(0o755)  # mkdtemp's 0700 would hide the model from other users of a shared root
        try:
            _write(name, tmp)
            _replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    marker = _read_marker(final)
    return StandIn(name, final, marker["reserved_token_id"], marker["num_hidden_layers"])


def _read_marker(path: Path) -> dict | None:
    try:
        marker = json.loads((path / _MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if marker.get("version") == _VERSION else None


def _replace(tmp: Path, final: Path) -> None:
    """Rename the finished build into place; a stale or half-written `final` is moved aside first."""
    if final.exists():
        if _read_marker(final) is not None:  # another builder finished first
            return
        stale = Path(tempfile.mkdtemp(prefix=f".{final.name}-stale-", dir=final.parent))
        os.rename(final, stale / "old")
        shutil.rmtree(stale, ignore_errors=True)
    try:
        os.rename(tmp, final)
    except OSError:
        if _read_marker(final) is None:  # not a concurrent builder that won the race
            raise


def _write(name: str, out: Path) -> None:
    family = FAMILIES[name]
    tok = _tokenizer(family.tokens)
    config = family.config(tok)
    model = _model(config)
    model.generation_config = GenerationConfig(**family.generation(tok.convert_tokens_to_ids))
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    reserved = family.tokens.reserved
    marker = {
        "name": name,
        "version": _VERSION,
        "reserved_token_id": None if reserved is None else tok.convert_tokens_to_ids(reserved),
        "num_hidden_layers": config.num_hidden_layers,  # GPT2Config maps it to n_layer
    }
    (out / _MARKER).write_text(json.dumps(marker, indent=2) + "\n")


def _model(config: PretrainedConfig) -> torch.nn.Module:
    """The real architecture class with seeded random weights.

    Embeddings are drawn with the real std but the other matrices much larger: with the real init the residual
    stream is dominated by the input embedding, and a tied-embedding model (Qwen, Gemma) greedily repeats its
    last token forever.
    """
    torch.manual_seed(_SEED)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    generator = torch.Generator().manual_seed(_SEED)
    with torch.no_grad():
        for _, param in sorted(model.named_parameters()):  # name order; tied embeddings appear once
            if param.dim() == 2:
                std = _EMBED_STD if id(param) in embeddings else _INIT_STD
                param.copy_(torch.randn(param.shape, generator=generator) * std)
    return model


def _tokenizer(spec: _Tokens) -> PreTrainedTokenizerFast:
    backend = _train_bpe(spec.leading, spec.split, spec.prefix_space, spec.nfc)
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in spec.trailing])
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in spec.plain])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=spec.bos,
        eos_token=spec.eos,
        pad_token=spec.pad,
        unk_token=spec.unk,
        add_bos_token=spec.add_bos_token,
        add_eos_token=False,
        chat_template=spec.chat_template,
        model_max_length=spec.max_length,
        clean_up_tokenization_spaces=False,
    )


def _train_bpe(leading: tuple[str, ...], split: str | None, prefix_space: bool, nfc: bool) -> Tokenizer:
    """A byte-level BPE with `leading` special tokens at ids 0.. and `_BPE_VOCAB` learned tokens after them."""
    tok = Tokenizer(models.BPE())
    if nfc:
        tok.normalizer = normalizers.NFC()
    if split is None:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(split), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=prefix_space, use_regex=False),
            ]
        )
    # Sentencepiece-style decoders drop the dummy prefix's space again.
    tok.decoder = (
        decoders.Sequence([decoders.ByteLevel(), decoders.Strip(" ", 1, 0)]) if prefix_space else decoders.ByteLevel()
    )
    trainer = trainers.BpeTrainer(
        vocab_size=_BPE_VOCAB + len(leading),
        special_tokens=list(leading),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    return tok


@lru_cache(maxsize=1)
def _corpus() -> tuple[str, ...]:
    """The first ~400 KB of the running interpreter's stdlib sources, in file-name order."""
    texts, size = [], 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        texts.append(path.read_text(encoding="utf-8", errors="replace"))
        size += len(texts[-1])
        if size >= _CORPUS_CHARS:
            break
    return tuple(texts)
