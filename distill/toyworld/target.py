"""Train the toy world's LLaMA target on CPU (plain PyTorch; it is built once and cached)."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Callable, Optional

import torch
from tqdm.auto import tqdm
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from distill.device import native_bf16
from distill.toyworld.config import SiblingDraft, WorldConfig


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


def sibling_config(cfg: WorldConfig, d: SiblingDraft) -> WorldConfig:
    """The world's settings with the target's shape replaced by its sibling draft LM's."""
    return replace(
        cfg,
        name=f"{cfg.name} draft",
        hidden_size=d.hidden_size,
        intermediate_size=d.intermediate_size,
        num_hidden_layers=d.num_hidden_layers,
        num_attention_heads=d.num_attention_heads,
        train_steps=d.train_steps or cfg.train_steps,
    )


def _windows(
    stream: torch.Tensor, n: int, seq_len: int, gen: torch.Generator, doc_starts: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """`n` windows of `seq_len` tokens at random offsets of `stream`, or at random entries of `doc_starts`."""
    if n == 0:  # a batch all from the other stream (a small batch, or chat_fraction 0 or 1)
        return stream.new_empty((0, seq_len))
    if doc_starts is None:
        starts = torch.randint(0, len(stream) - seq_len - 1, (n,), generator=gen)
    else:
        usable = doc_starts[doc_starts <= len(stream) - seq_len]
        starts = usable[torch.randint(0, len(usable), (n,), generator=gen)]
    return torch.stack([stream[s : s + seq_len] for s in starts.tolist()])  # (n, T)


def lr_factor(cfg: WorldConfig):
    """The schedule's multiplier of cfg.lr at each step: linear warm-up, then cosine or warmup-stable-decay (wsd with
    decay_fraction 0: constant)."""
    warmup = cfg.warmup_steps or max(1, cfg.train_steps // 20)
    decay = cfg.train_steps * cfg.decay_fraction
    if cfg.schedule not in ("cosine", "wsd"):
        raise ValueError(f"toy world {cfg.name}: schedule {cfg.schedule!r} is not 'cosine' or 'wsd'")

    def factor(step: int) -> float:
        ramp = min(1.0, (step + 1) / warmup)
        if cfg.schedule == "cosine":
            return ramp * 0.5 * (1 + math.cos(math.pi * min(1.0, step / cfg.train_steps)))
        return ramp * (min(1.0, max(0.0, (cfg.train_steps - step) / decay)) if decay else 1.0)

    return factor


def training_precision(cfg: WorldConfig, device: torch.device) -> str:
    """bf16 where the world asks for it and the device computes it natively, else fp32 (said in one line)."""
    if not cfg.bf16:
        return "fp32"
    if native_bf16(device):
        return "bf16"
    print(
        f"toy world: {cfg.name} asks for bf16 autocast, but this {device.type} has no native bf16 (no AVX-512-BF16 or "
        "AMX): training in fp32, ~10x faster here than emulated bf16",
        flush=True,
    )
    return "fp32"


def _loss_and_grads(model: LlamaForCausalLM, batch: torch.Tensor, bf16: bool) -> torch.Tensor:
    with torch.autocast(batch.device.type, dtype=torch.bfloat16, enabled=bf16):
        loss = model(input_ids=batch, labels=batch).loss
    loss.backward()
    return loss


def train_target(
    model: LlamaForCausalLM,
    cfg: WorldConfig,
    code_stream: torch.Tensor,
    chat_stream: torch.Tensor,
    on_eval: Optional[Callable[[int, LlamaForCausalLM, float], None]] = None,
    eval_every: int = 0,
    chat_starts: Optional[torch.Tensor] = None,
) -> dict:
    """Next-token training on random windows of the code and chat token streams (weights and optimizer in fp32;
    cfg.bf16: the matmuls under bf16 autocast where the device computes bf16 natively, else fp32; cfg.compile: the
    forward and backward compiled, eager if that fails).
    cfg.chat_windows "documents": chat windows start at `chat_starts`, the offsets of the chat documents.
    `on_eval(step, model, train_loss)` is called in eval mode every `eval_every` steps and after the last
    (scripts/sweep_copy.py watches a target learn to copy)."""
    if cfg.chat_windows not in ("random", "documents"):
        raise ValueError(f"toy world {cfg.name}: chat_windows {cfg.chat_windows!r} is not 'random' or 'documents'")
    if cfg.chat_windows == "documents" and chat_starts is None:
        raise ValueError(f"toy world {cfg.name}: chat_windows 'documents' needs the chat documents' offsets")
    chat_starts = chat_starts if cfg.chat_windows == "documents" else None
    gen = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(cfg))
    step_fn = torch.compile(_loss_and_grads) if cfg.compile else _loss_and_grads
    precision = training_precision(cfg, code_stream.device)
    bf16 = precision == "bf16"
    n_chat = round(cfg.batch_size * cfg.chat_fraction)
    model.train()
    start, loss = time.perf_counter(), torch.tensor(0.0)
    bar = tqdm(total=cfg.train_steps, desc=f"toy world: training {cfg.name} target", leave=False)
    for step in range(1, cfg.train_steps + 1):
        batch = torch.cat(
            [
                _windows(code_stream, cfg.batch_size - n_chat, cfg.seq_len, gen),
                _windows(chat_stream, n_chat, cfg.seq_len, gen, chat_starts),
            ]
        )
        try:
            loss = step_fn(model, batch, bf16)
        except Exception as err:  # a compiler missing or failing on this machine: the same step, eager
            if step_fn is _loss_and_grads:
                raise
            print(f"toy world: torch.compile failed ({type(err).__name__}); training eagerly", flush=True)
            opt.zero_grad(set_to_none=True)
            step_fn = _loss_and_grads
            loss = step_fn(model, batch, bf16)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        bar.update()
        bar.set_postfix(loss=f"{loss.item():.3f}", lr=f"{sched.get_last_lr()[0]:.1e}")  # one host sync a step
        if on_eval and eval_every and (step % eval_every == 0 or step == cfg.train_steps):
            model.eval()
            on_eval(step, model, loss.item())
            model.train()
    bar.close()
    model.eval()
    elapsed = time.perf_counter() - start
    tokens = cfg.train_steps * cfg.batch_size * cfg.seq_len
    return {
        "train_seconds": round(elapsed, 1),
        "train_tokens": tokens,
        "final_train_loss": round(loss.item(), 4),
        "train_precision": precision,
    }


@torch.no_grad()
def heldout_loss(model: LlamaForCausalLM, stream: torch.Tensor, seq_len: int, n: int = 64) -> float:
    """Mean next-token loss on `n` fixed windows of the held-out code stream."""
    gen = torch.Generator().manual_seed(1234)
    batch = _windows(stream, n, seq_len, gen)
    return float(model(input_ids=batch, labels=batch).loss)
