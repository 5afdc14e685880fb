"""Train the toy world's LLaMA target on CPU (plain PyTorch; it is built once and cached)."""

from __future__ import annotations

import math
import time

import torch
from tqdm.auto import tqdm
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from distill.toyworld.config import WorldConfig


def target_config(cfg: WorldConfig, pad_token_id: int | None = None, eos_token_id: int | None = None) -> LlamaConfig:
    """The toy target's architecture (its vocabulary is the BPE tokenizer's, cfg.vocab_size)."""
    return LlamaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_attention_heads,
        max_position_embeddings=max(1024, cfg.seq_len),
        tie_word_embeddings=True,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        bos_token_id=None,
    )


def build_target(cfg: WorldConfig, tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    if len(tokenizer) != cfg.vocab_size:
        raise ValueError(f"the toy tokenizer has {len(tokenizer)} tokens, the world config says {cfg.vocab_size}")
    config = target_config(cfg, tokenizer.pad_token_id, tokenizer.eos_token_id)
    torch.manual_seed(cfg.seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = None
    return model


def _windows(stream: torch.Tensor, n: int, seq_len: int, gen: torch.Generator) -> torch.Tensor:
    starts = torch.randint(0, len(stream) - seq_len - 1, (n,), generator=gen)
    return torch.stack([stream[s : s + seq_len] for s in starts.tolist()])  # (n, T)


def train_target(
    model: LlamaForCausalLM,
    cfg: WorldConfig,
    code_stream: torch.Tensor,
    chat_stream: torch.Tensor,
) -> dict:
    """Next-token training on random windows of the code and chat token streams (weights and optimizer in fp32;
    cfg.bf16: the matmuls under bf16 autocast)."""
    gen = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01, betas=(0.9, 0.95))
    warmup = max(1, cfg.train_steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / cfg.train_steps))),
    )
    n_chat = round(cfg.batch_size * cfg.chat_fraction)
    model.train()
    start, loss = time.perf_counter(), torch.tensor(0.0)
    bar = tqdm(range(cfg.train_steps), desc=f"toy world: training {cfg.name} target", leave=False)
    for _ in bar:
        batch = torch.cat(
            [
                _windows(code_stream, cfg.batch_size - n_chat, cfg.seq_len, gen),
                _windows(chat_stream, n_chat, cfg.seq_len, gen),
            ]
        )
        with torch.autocast(batch.device.type, dtype=torch.bfloat16, enabled=cfg.bf16):
            loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        bar.set_postfix(loss=f"{loss.item():.3f}")  # host sync once per step: fine off the hot path
    model.eval()
    elapsed = time.perf_counter() - start
    tokens = cfg.train_steps * cfg.batch_size * cfg.seq_len
    return {"train_seconds": round(elapsed, 1), "train_tokens": tokens, "final_train_loss": round(loss.item(), 4)}


@torch.no_grad()
def heldout_loss(model: LlamaForCausalLM, stream: torch.Tensor, seq_len: int, n: int = 64) -> float:
    """Mean next-token loss on `n` fixed windows of the held-out code stream."""
    gen = torch.Generator().manual_seed(1234)
    batch = _windows(stream, n, seq_len, gen)
    return float(model(input_ids=batch, labels=batch).loss)
