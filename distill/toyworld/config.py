"""Sizes of the toy world. `micro` is for tests (about a minute), `toy` for the main job."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class WorldConfig:
    name: str
    corpus_bytes: int  # train text budget in bytes (0 = the whole stdlib); smaller = confident sooner
    vocab_size: int  # BPE vocabulary incl. special tokens
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int  # deep relative to the drafter, so speculation can pay off
    num_attention_heads: int  # head_dim = hidden / heads must stay >= 32 (vLLM's CPU attention)
    seq_len: int  # training window; prompts + answers stay within it at inference
    batch_size: int
    train_steps: int
    lr: float
    chat_fraction: float  # share of training windows drawn from chat-formatted documents
    num_chat_docs: int  # chat documents built from the train files for target training
    num_prompts: int  # held-out prompts written for eval
    num_train_prompts: int  # train-split prompts written for distill (nested: the first N are the same for any count)
    seed: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


MICRO = WorldConfig(
    name="micro",
    corpus_bytes=400_000,
    vocab_size=512,
    hidden_size=64,
    intermediate_size=176,
    num_hidden_layers=2,
    num_attention_heads=2,
    seq_len=128,
    batch_size=16,
    train_steps=600,
    lr=5e-3,
    chat_fraction=0.5,
    num_chat_docs=2000,
    num_prompts=64,
    num_train_prompts=64,
)

TOY = WorldConfig(
    name="toy",
    corpus_bytes=1_500_000,
    vocab_size=2048,
    hidden_size=256,
    intermediate_size=704,
    num_hidden_layers=8,
    num_attention_heads=8,
    seq_len=128,
    batch_size=16,
    train_steps=400,
    lr=3e-3,
    chat_fraction=0.5,
    num_chat_docs=20000,
    num_prompts=256,
    num_train_prompts=4096,  # the data-scaling benchmark's largest size; recipes take data.max_prompts of them
)

SIZES = {c.name: c for c in (MICRO, TOY)}
