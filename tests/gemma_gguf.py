"""A Gemma-3-style target as a GGUF file, written by the tests in llama.cpp's layout (gguf-py): what a llama.cpp
user's Gemma 3 file holds, small enough for CI.

- K-quant tensors (Q4_K attention output, Q6_K down projection, as Q4_K_M files mix them) beside Q5_0 and Q8_0;
  gguf-py cannot quantize K types, so their blocks are drawn at random: the file is the model.
- Sliding-window attention: five of every six layers see the last SLIDING_WINDOW tokens (Gemma 3's pattern), a
  window the tests' prompts and decodes run past.
- Scaled embeddings (Gemma multiplies its token embeddings by √hidden in the model, not in the weights) and norms
  stored as 1 + w (llama.cpp's convention for Gemma, undone by transformers on load).
- A SentencePiece-style vocabulary (byte fallback, control and byte token types, no merges: transformers rebuilds
  them from the order, llama.cpp merges by score, so the scores follow the order) of VOCAB tokens, Gemma's
  262,144 shrunk, learned with `tokenizers` from the stdlib's text; `<start_of_turn>`/`<end_of_turn>` markers and a
  Gemma-style chat template unless `chat_template=False`.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import gguf
import numpy as np

HIDDEN, LAYERS, FFN, HEAD_DIM, VOCAB = 256, 6, 512, 256, 4096  # K-quant rows need multiples of 256
SLIDING_WINDOW = 32  # Gemma 3 270M's is 512: a short one, so that the tests' decodes run past it
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
PAD, EOS, BOS, UNK, END_OF_TURN = 0, 1, 2, 3, 6
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{{ m['content'] }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
Q = gguf.GGMLQuantizationType
LAYER_TYPES = {  # llama.cpp's name inside blk.N → (numpy shape, stored type)
    "attn_q.weight": ((HEAD_DIM, HIDDEN), Q.Q5_0),
    "attn_k.weight": ((HEAD_DIM, HIDDEN), Q.Q5_0),
    "attn_v.weight": ((HEAD_DIM, HIDDEN), Q.Q8_0),
    "attn_output.weight": ((HIDDEN, HEAD_DIM), Q.Q4_K),
    "ffn_gate.weight": ((FFN, HIDDEN), Q.Q5_0),
    "ffn_up.weight": ((FFN, HIDDEN), Q.Q5_0),
    "ffn_down.weight": ((HIDDEN, FFN), Q.Q6_K),
}
NORMS = ["attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"]


def write_gemma3_gguf(out: Path, *, chat_template: bool = True, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(out), "gemma3")
    writer.add_name("gemma3 stand-in")
    writer.add_context_length(2048)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(1)
    writer.add_head_count_kv(1)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(1e6)
    writer.add_sliding_window(SLIDING_WINDOW)
    _add_tokenizer(writer, chat_template)
    embeddings = gguf.quants.quantize(_normal(rng, (VOCAB, HIDDEN), 0.05), Q.Q8_0)
    writer.add_tensor("token_embd.weight", embeddings, raw_dtype=Q.Q8_0)
    writer.add_tensor("output_norm.weight", 1 + _normal(rng, (HIDDEN,), 0.05))
    for layer in range(LAYERS):
        for name, (shape, qtype) in LAYER_TYPES.items():
            writer.add_tensor(f"blk.{layer}.{name}", _stored(rng, shape, qtype), raw_dtype=qtype)
        for norm in NORMS:
            writer.add_tensor(f"blk.{layer}.{norm}.weight", 1 + _normal(rng, (HIDDEN,), 0.05))
        for norm in ("attn_q_norm", "attn_k_norm"):
            writer.add_tensor(f"blk.{layer}.{norm}.weight", 1 + _normal(rng, (HEAD_DIM,), 0.05))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def _normal(rng, shape, scale: float) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _stored(rng, shape: tuple[int, int], qtype) -> np.ndarray:
    """A (rows, columns) matrix in `qtype`'s blocks: quantized from random weights, or for a K type (which gguf-py
    cannot quantize) random blocks whose scales keep the weights near ±0.05."""
    if qtype not in (Q.Q4_K, Q.Q6_K):
        return gguf.quants.quantize(_normal(rng, shape, 1 / np.sqrt(shape[1])), qtype)
    values, size = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(shape[0], shape[1] // values, size), dtype=np.uint8)
    if qtype == Q.Q4_K:  # d, dmin (f16), 12 bytes of 6-bit scales and mins, 128 bytes of 4-bit values
        blocks[..., 0:4] = np.array([4e-3, 3e-2], dtype=np.float16).view(np.uint8)  # dmin ≈ 7.5 d: mean ≈ 0
        blocks[..., 4:16] &= 0x0F  # small scales (≤ 15) and mins
    else:  # Q6_K: 128 bytes low bits, 64 high bits, 16 int8 scales, d (f16)
        scales = rng.integers(-8, 8, size=(shape[0], shape[1] // values, 16)).astype(np.int8)
        blocks[..., 192:208] = scales.view(np.uint8)
        blocks[..., 208:210] = np.array([2e-4], dtype=np.float16).view(np.uint8)
    return blocks.reshape(shape[0], -1)


def _add_tokenizer(writer, chat_template: bool) -> None:
    pieces = _learned_pieces(VOCAB - len(SPECIALS) - 256)
    unused = [f"<unused{i}>" for i in range(VOCAB - len(SPECIALS) - 256 - len(pieces))]  # as Gemma's vocabulary has
    tokens = SPECIALS + [f"<0x{b:02X}>" for b in range(256)] + pieces + unused
    types = [gguf.TokenType.CONTROL] * len(SPECIALS) + [gguf.TokenType.BYTE] * 256
    types += [gguf.TokenType.NORMAL] * len(pieces) + [gguf.TokenType.CONTROL] * len(unused)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    scores = [-1000.0] * len(SPECIALS) + [0.0] * 256 + [-float(i) for i in range(len(pieces))]
    writer.add_token_scores(scores + [-1000.0] * len(unused))
    writer.add_token_types(types)
    writer.add_bos_token_id(BOS)
    writer.add_eos_token_id(END_OF_TURN if chat_template else EOS)
    writer.add_unk_token_id(UNK)
    writer.add_pad_token_id(PAD)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(False)
    if chat_template:
        writer.add_chat_template(TEMPLATE)


def _learned_pieces(count: int) -> list[str]:
    """`count` SentencePiece-style pieces ("▁" for a space), every character first, then the merges in the order a
    BPE learns them from the stdlib's text (deterministic: one pass over sorted files)."""
    from tokenizers import SentencePieceBPETokenizer

    root = Path(sysconfig.get_paths()["stdlib"])
    texts = [p.read_text(encoding="utf-8", errors="ignore") for p in sorted(root.glob("*.py"))[:60]]
    learner = SentencePieceBPETokenizer(add_prefix_space=False)
    learner.train_from_iterator(texts, vocab_size=count, min_frequency=2, show_progress=False, limit_alphabet=200)
    vocab = learner.get_vocab()
    return [piece for piece in sorted(vocab, key=vocab.get) if piece not in SPECIALS][:count]
