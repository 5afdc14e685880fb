"""Which prompts the eval stage measures, said once for preflight, eval and the card, and the proof that
none of them was trained on.

One of, in this order: `eval_prompts` (split `eval_split`, default train), `eval_split` of data.prompts,
the toy world's heldout split, or the `data.holdout` prompts split off data.prompts before distillation
(distill/prompts/heldout.py). A run with none of these is refused before any work. The prompts are read from the column
`eval_prompts_column` of eval_prompts, or `data.prompts_column` of data.prompts (None: auto-detected).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from jinja2.exceptions import TemplateError

from distill.prompts.chat import asks, encode_prompt, pending_turn
from distill.prompts.heldout import TOYWORLD, digest_of_set, heldout_indices, holdout_active, prompt_digest
from distill.prompts.read import read_prompts
from distill.prompts.sets import PromptSet
from distill.targets.toyworld import toyworld_prompts
from train.config import RunConfig
from train.errors import PipelineError

FILE_SUFFIXES = (".jsonl", ".json", ".parquet", ".jsonl.gz", ".json.gz")


@dataclass(frozen=True)
class EvalSource:
    source: str  # a file, a dataset directory or name, or toyworld
    split: Optional[str]  # None: a file's (or single-split dataset's) only split
    holdout: bool  # True: only the held-out slice of `source` (data.holdout prompts, seeded)
    description: str  # for the report and the card
    column: Optional[str] = None  # the column holding the prompts; None = auto-detected

    def as_dict(self) -> dict:
        return {
            "source": self.source,
            "split": self.split,
            "held_out_slice": self.holdout,
            "what": self.description,
            "column": self.column,
        }


def eval_source(cfg: RunConfig) -> EvalSource:
    """The eval prompt source of `cfg`, or one error naming the settings that would give one."""
    if cfg.eval_prompts:
        split = cfg.eval_split
        what = f"eval_prompts={cfg.eval_prompts}" + (f" (split {split})" if split else "")
        return EvalSource(cfg.eval_prompts, split, False, what, cfg.eval_prompts_column)
    if cfg.eval_prompts_column:
        raise PipelineError(
            f"eval_prompts_column={cfg.eval_prompts_column} names a column of eval_prompts, which is not set; set "
            "eval_prompts=FILE_OR_DATASET, or data.prompts_column for the prompts of data.prompts"
        )
    return replace(_data_source(cfg), column=cfg.data.prompts_column)


def _data_source(cfg: RunConfig) -> EvalSource:
    """The eval prompts of data.prompts: a split, the toy world's heldout split, or the held-out slice."""
    if cfg.eval_split:
        if cfg.data.prompts == TOYWORLD or not _is_file(cfg.data.prompts):
            if cfg.eval_split == cfg.data.split:
                raise PipelineError(
                    f"eval_split={cfg.eval_split} is data.split, the split the drafter is trained on; name another "
                    "split, set eval_prompts=FILE, or unset eval_split to measure the data.holdout prompts"
                )
            return EvalSource(cfg.data.prompts, cfg.eval_split, False, f"split {cfg.eval_split} of {cfg.data.prompts}")
        raise PipelineError(
            f"eval_split={cfg.eval_split}: data.prompts={cfg.data.prompts} is a file, which has no splits; set "
            "eval_prompts=FILE, or unset eval_split to measure the data.holdout prompts split off before distillation"
        )
    if cfg.data.prompts == TOYWORLD:
        return EvalSource(TOYWORLD, "heldout", False, "the toy world's heldout split (disjoint by source file)")
    if holdout_active(cfg.data.prompts, cfg.data.holdout):
        what = (
            f"the {cfg.data.holdout} prompts of {cfg.data.prompts} (split {cfg.data.split}) held out before "
            f"distillation (seed {cfg.data.holdout_seed})"
        )
        return EvalSource(cfg.data.prompts, cfg.data.split, True, what)
    raise PipelineError(
        "no held-out prompts to measure the drafter on: data.holdout=0 and neither eval_prompts nor eval_split is "
        "set; set data.holdout=64 (split off data.prompts before distillation), eval_prompts=FILE or eval_split=SPLIT"
    )


def check_eval_source(cfg: RunConfig) -> None:
    """Preflight: the eval source exists, has the split, and leaves room for the prompts eval decodes; a local
    eval_prompts file or directory is read, so that a bad row or column fails now rather than after training."""
    src = eval_source(cfg)
    _check_not_trained_on(cfg)
    if cfg.eval_prompts and Path(cfg.eval_prompts).expanduser().exists():
        eval_conversations(cfg, 0)
    wanted = cfg.eval.num_prompts + cfg.eval.warmup_prompts
    if src.holdout and cfg.data.holdout < wanted:
        raise PipelineError(
            f"data.holdout={cfg.data.holdout} held-out prompts are fewer than eval decodes (eval.num_prompts="
            f"{cfg.eval.num_prompts} + eval.warmup_prompts={cfg.eval.warmup_prompts}); raise data.holdout to {wanted}"
        )
    splits = local_splits(src.source)
    if splits is not None and src.split is not None and src.split not in splits:
        key = "eval_split" if (cfg.eval_split or cfg.eval_prompts) else "data.split"
        raise PipelineError(
            f"{src.source} has splits {splits}, not {src.split!r}; set {key} to one of them"
            + ("" if cfg.eval_split or cfg.eval_prompts else ", or eval_prompts=FILE")
        )


def _parts(source: str) -> set[str]:
    """What a prompt source reads, to compare two: a local file or directory by its real path, a composite of prompt
    sets (mt_bench+humaneval) by each set, anything else (a dataset id) by its name."""
    from distill.prompts.sets import is_prompt_set

    if is_prompt_set(source):
        return set(source.split("+"))
    path = Path(source).expanduser()
    return {str(path.resolve())} if path.exists() else {source}


def _check_not_trained_on(cfg: RunConfig) -> None:
    """eval_prompts naming (in part) a source the drafter is trained on, in the same split: refused before any work,
    where the overlap check would find it only after distilling and training."""
    from distill.prompts.sets import is_prompt_set

    if not cfg.eval_prompts:
        return
    trained = [("data.prompts", cfg.data.prompts, cfg.data.split)]
    trained += [(f"data.mix[{i}].prompts", m.prompts, m.split) for i, m in enumerate(cfg.data.mix)]
    measured = _parts(cfg.eval_prompts)
    for key, source, split in trained:
        same_split = _is_file(source) or is_prompt_set(source) or cfg.eval_split in (None, split)
        if source and source != TOYWORLD and same_split and (common := measured & _parts(source)):
            what = ", ".join(sorted(Path(c).name if os.sep in c else c for c in common))
            raise PipelineError(
                f"eval_prompts={cfg.eval_prompts} measures {what}, which {key}={source} trains the drafter on: its "
                "figures would be on prompts it was trained on; give eval_prompts other prompts, or unset it to "
                "measure the data.holdout prompts held out of data.prompts"
            )


def local_splits(source: str) -> Optional[list[str]]:
    """The splits of a dataset directory saved with save_to_disk (None: not such a directory)."""
    info = Path(source).expanduser() / "dataset_dict.json"
    if info.is_file():
        return list(json.loads(info.read_text())["splits"])
    return ["train"] if (Path(source).expanduser() / "dataset_info.json").is_file() else None


def _is_file(source: str) -> bool:
    return source.endswith(FILE_SUFFIXES) or Path(source).expanduser().is_file()


def eval_conversations(cfg: RunConfig, limit: int, tokenizer=None) -> tuple[EvalSource, PromptSet]:
    """Up to `limit` conversations of the eval source and their categories, in order (the held-out slice: in file
    order); with a tokenizer, only those its chat template accepts."""
    src = eval_source(cfg)
    keys = {
        "prompts_key": "eval_prompts" if cfg.eval_prompts else "data.prompts",
        "split_key": "eval_split" if cfg.eval_prompts or cfg.eval_split else "data.split",
    }
    toy = toyworld_prompts(cfg.target.name_or_path, src.split) if src.source == TOYWORLD else None
    rows = read_prompts(src.source, src.split, toy, column=src.column, **keys)
    if src.holdout:
        rows = _pick(rows, heldout_indices(len(rows.conversations), cfg.data.holdout, cfg.data.holdout_seed))
    if tokenizer is not None:
        rows = templated(rows, tokenizer)
    rows = rows.across_categories()  # eval.num_prompts of MT-Bench: every category, not the first one's ten
    return src, _pick(rows, range(min(limit, len(rows.conversations))))


def _pick(rows: PromptSet, indices) -> PromptSet:
    return PromptSet([rows.conversations[i] for i in indices], [rows.categories[i] for i in indices])


def templated(rows: PromptSet, tokenizer) -> PromptSet:
    """The conversations with a user turn that the target's chat template accepts (Gemma's and Mistral's refuse a
    system turn), as distillation drops the others too; the count left out is printed. A `turns` conversation is
    judged by its first turn (its later ones hold the target's answers, written when eval decodes them)."""
    kept = []
    for i, c in enumerate(rows.conversations):
        prompt, _ = pending_turn(c)
        if not asks(prompt):
            continue
        try:
            encode_prompt(tokenizer, prompt)
            kept.append(i)
        except TemplateError:
            pass
    if len(kept) < len(rows.conversations):
        print(
            f"[eval] warning: left out {len(rows.conversations) - len(kept)} prompts without a user turn or refused "
            "by the target's chat template"
        )
    return _pick(rows, kept)


def training_overlap(eval_ids: list[list[int]], dataset) -> dict:
    """How many of the measured prompts (token ids as eval decoded them) the distilled dataset trained on."""
    eval_digests = [prompt_digest(ids) for ids in eval_ids]
    trained = training_digests(dataset) if dataset is not None else None
    return {
        "eval_digest": digest_of_set(eval_digests),
        "training_digest": digest_of_set(trained) if trained is not None else None,
        "overlap": sum(d in trained for d in eval_digests) if trained is not None else None,
    }


def training_digests(dataset) -> set[str]:
    """The digests of the distilled dataset's prompts (each row's ids up to its prompt length)."""
    return {prompt_digest(ids[:n]) for ids, n in zip(dataset["input_ids"], dataset["prompt_length"])}


def check_disjoint(report: dict, samples: list[dict], dataset) -> None:
    """The gate's proof, from the files: the samples are the prompts the report names (same digest) and none of
    them is a prompt of the distilled dataset on disk."""
    measured = report.get("prompts")
    if not measured:
        return  # a report from before held-out proofs (or python -m eval on a third-party drafter)
    ids = [s["prompt_ids"] for s in samples]
    if digest_of_set(prompt_digest(i) for i in ids) != measured["eval_digest"]:
        raise PipelineError(
            "refusing to publish: eval_samples.jsonl does not hold the prompts the report names; re-run eval, "
            "then publish"
        )
    trained = training_digests(dataset) if dataset is not None else set()
    if overlap := sum(prompt_digest(i) in trained for i in ids):
        raise PipelineError(
            f"refusing to publish: {overlap} of the measured prompts are in the distilled training data; re-run eval "
            "on held-out prompts (eval_prompts=FILE or eval_split=SPLIT)"
        )
