"""GGUF files the tests write themselves from an HF LLaMA directory, with the `gguf` package (as llama.cpp's converter
lays them out: its tensor names, its rotary permutation of q/k, its tokenizer keys), so the GGUF target source is
tested without llama.cpp and without downloads."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
from safetensors.numpy import load_file

LAYER_TENSORS = {  # HF name inside model.layers.N → llama.cpp's name inside blk.N
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def _permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's rotary layout of q/k rows (transformers undoes it when it reads the file)."""
    rows = weight.shape[0]
    return weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def write_gguf(
    model_dir: Path,
    out: Path,
    *,
    qtype: gguf.GGMLQuantizationType = gguf.GGMLQuantizationType.F32,
    architecture: str = "llama",
    pre: str = "gpt-2",
    extra_merges: tuple[tuple[str, str], ...] = (),
    chat_template: bool = True,
) -> Path:
    """`model_dir` (a LLaMA with a byte-level BPE tokenizer) as one GGUF file; matrices stored as `qtype`.

    extra_merges: merges that replace the last-learned ones (their tokens take those ids, so the vocabulary keeps the
    embedding's size): a tokenizer that llama.cpp and transformers read differently. chat_template=False: the file
    declares none, as a base model's GGUF."""
    config = json.loads((model_dir / "config.json").read_text())
    spec = json.loads((model_dir / "tokenizer.json").read_text())
    writer = gguf.GGUFWriter(str(out), architecture)
    writer.add_name("stand-in")
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_rope_freq_base(config.get("rope_theta", (config.get("rope_parameters") or {}).get("rope_theta", 1e4)))
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_dimension_count(config["hidden_size"] // config["num_attention_heads"])
    _add_tokenizer(writer, model_dir, spec, pre, extra_merges, config, chat_template)
    weights = load_file(str(model_dir / "model.safetensors"))
    for name, weight in _llama_cpp_tensors(weights, config):
        block = gguf.GGML_QUANT_SIZES[qtype][0]  # rows that don't fill whole blocks stay F32, as llama.cpp keeps them
        matrix = weight.ndim == 2 and qtype != gguf.GGMLQuantizationType.F32 and weight.shape[-1] % block == 0
        data = gguf.quants.quantize(weight.astype(np.float32), qtype) if matrix else weight.astype(np.float32)
        writer.add_tensor(name, data, raw_dtype=qtype if matrix else None)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def _llama_cpp_tensors(weights: dict, config: dict):
    yield "token_embd.weight", weights["model.embed_tokens.weight"]
    yield "output_norm.weight", weights["model.norm.weight"]
    if "lm_head.weight" in weights and not config.get("tie_word_embeddings"):
        yield "output.weight", weights["lm_head.weight"]
    for layer in range(config["num_hidden_layers"]):
        for hf, ours in LAYER_TENSORS.items():
            weight = weights[f"model.layers.{layer}.{hf}"]
            if hf.startswith("self_attn.q_proj"):
                weight = _permute(weight, config["num_attention_heads"])
            elif hf.startswith("self_attn.k_proj"):
                weight = _permute(weight, config["num_key_value_heads"])
            yield f"blk.{layer}.{ours}", weight


def _add_tokenizer(writer, model_dir: Path, spec: dict, pre: str, extra_merges, config: dict, template: bool) -> None:
    vocab = dict(spec["model"]["vocab"])
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    for a, b in extra_merges:
        vocab[a + b] = vocab.pop(merges.pop().replace(" ", ""))  # no later merge uses the last-learned token
        merges.append(f"{a} {b}")
    special = {t["id"] for t in spec["added_tokens"] if t["special"]}
    tokens = sorted(vocab, key=vocab.get)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(
        [gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL for i in range(len(tokens))]
    )
    writer.add_token_merges(merges)
    writer.add_eos_token_id(config["eos_token_id"])
    if config.get("pad_token_id") is not None:
        writer.add_pad_token_id(config["pad_token_id"])
    if template and (template_file := model_dir / "chat_template.jinja").is_file():
        writer.add_chat_template(template_file.read_text())
