"""Sizes of the toy world. `micro` is for tests (seconds to build), `toy` for the main job and the benchmarks, `chat`
the world that copies from its context (chat task kinds, a 1,024-token context; the bake-offs per workload)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace


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
    # chat task kinds (distill/toyworld/tasks.py KINDS), each also a held-out workload split; () = short code
    # continuations only (the micro world's, kept tiny for the tests)
    tasks: tuple[str, ...] = ()
    workload_prompts: int = 0  # held-out prompts per task kind (its workload split)
    max_answer_tokens: int = 0  # a task's answer is at most this long (0 = no bound)
    bf16: bool = False  # bf16 autocast where native (AMX/AVX-512-BF16 CPUs, GPUs: ~1.4x faster); fp32 elsewhere
    # learning-rate schedule: linear warm-up over warmup_steps (0 = train_steps // 20), then "cosine" decay to 0, or
    # "wsd": constant, then linear decay to 0 over the last decay_fraction of the steps (the copy circuit forms
    # mid-run at the full rate; a cosine lowers the rate before it does)
    warmup_steps: int = 0
    schedule: str = "cosine"
    decay_fraction: float = 0.2
    compile: bool = False  # torch.compile the training step (CPU: ~1.35x faster after ~30 s; falls back to eager)
    # where chat training windows start: "random" offsets of the document stream, or "documents": at a document's
    # first token, so a window holds whole requests with their answers (a window cut inside an edit's request trains
    # its answer as code to guess, not a block to copy)
    chat_windows: str = "random"
    seed: int = 0

    def as_dict(self) -> dict:
        return asdict(self)

    def key_fields(self) -> dict:
        """The fields that say what a build produces: a field added later counts only where it differs from its
        default, so a new knob does not invalidate the worlds already cached (the toy world takes ~18 min)."""
        return {k: v for k, v in self.as_dict().items() if k not in _ADDED or v != _ADDED[k]}


_ADDED = {  # fields added after builder v2, at their defaults
    "tasks": (),
    "workload_prompts": 0,
    "max_answer_tokens": 0,
    "bf16": False,
    "warmup_steps": 0,
    "schedule": "cosine",
    "decay_fraction": 0.2,
    "compile": False,
    "chat_windows": "random",
}


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

# The toy world's successor for the bake-offs (the main job stays on `toy`, train/results/toy.md says why). A
# 1,024-token context and chat tasks of four kinds, each a held-out workload. Two findings set its recipe
# (train/results/toy.md, "What makes a toy target copy"): trained on 1.5 MB of code it memorises the train files
# (held-out loss rises after ~5 M tokens) and never learns to copy from its context; on the whole stdlib (9 MB) it
# learns to copy after ~5 M tokens at lr 5e-3 with a 200-step warm-up, held at full rate while the copy circuit forms (a
# shorter warm-up or a cosine decay delays it past 6.6 M).
# A second sweep: 4 layers learn it in fewer tokens than 6 or 8 (teacher-forced edit accuracy 0.64 after 6.6 M
# tokens, 8 layers 0.48), at half the cost a step; d192 at three quarters of d256's cost buys 1.5x the tokens in the
# same ~12 min build. Its greedy edits draw 38 % of their tokens from the prompt (8 layers d256: 12 %). Chat
# windows that start at a document (whole requests with their answers): greedy edits close their fence in 31 % of
# the answers instead of none, and loop in 38 % instead of 53 %. Then 8 layers of d128 for the same FLOPs a token
# (a 13.5-min build): greedy edits draw 71 % from the prompt, close their fence in 72 % and loop in 16 %.
CHAT = replace(
    TOY,
    name="chat",
    corpus_bytes=0,  # the whole stdlib: too much text to memorise in 1,800 steps, so copying is what pays
    # deep and narrow: 8 layers of d128 cost a token what 4 of d192 do, and copy far more of their prompt greedily
    # (edits: 71 % of the tokens from the prompt against 40 %); a forward costs more next to a 1-layer drafter too
    hidden_size=128,
    intermediate_size=352,
    num_hidden_layers=8,
    num_attention_heads=2,  # head_dim 64
    seq_len=1024,  # its whole context: long-context prompts and 256-token answers are trained at full length
    batch_size=8,  # copying forms after ~5-10 M tokens, not steps: batches of 4 took as many tokens
    train_steps=1800,
    lr=5e-3,
    warmup_steps=200,
    schedule="wsd",
    compile=True,
    chat_fraction=0.75,
    num_chat_docs=20000,
    tasks=("completion", "edit", "long_context", "multi_turn"),
    workload_prompts=64,  # the mixed held-out split (num_prompts=256) holds the kinds in turn
    max_answer_tokens=256,
    bf16=True,  # a CPU without native bf16 trains it in fp32 (emulated bf16 is ~10x slower than fp32 there)
    chat_windows="documents",
)

SIZES = {c.name: c for c in (MICRO, TOY, CHAT)}


@dataclass(frozen=True)
class SiblingDraft:
    """A small LM of the target's family pretrained on the target's text, windows and schedule: what users draft
    with (a Llama-3.2-1B for a Llama-3.1-70B). Its shape is the fresh draft LM's (heads/config.py DraftLMConfig), so
    a pretrained and a fresh draft compare at equal size and cost."""

    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 1
    num_attention_heads: int = 4  # head_dim 32, the minimum vLLM's CPU attention takes
    train_steps: int = 900  # a 1-layer LM gains little past ~7 M tokens (a 2-layer one, at 1.7x the cost, no more)

    def as_dict(self) -> dict:
        return asdict(self)


# The worlds with a sibling draft LM (`toyworld:<size>/draft`), built on first use into the world's directory. On
# the chat world (900 steps, 100 s on 2 cores) its held-out loss is 3.64 nats (the target's 2.49); a draft LM
# started from it is accepted for tau 1.68 against 1.32 from fresh weights, at the same size and training.
SIBLINGS = {"chat": SiblingDraft()}
