"""The eval stage: export the drafter once into drafter/, measure that directory with our engine,
serve the same directory with vLLM when asked (eval.serve=vllm), and record the export's hash. A bake-off's
contenders go through it together: one target, one set of prompts, one baseline (eval_stages)."""

from __future__ import annotations

from typing import Optional

from distill.stage.shards import load_distilled
from distill.targets import resolve_target
from distill.targets.load import eos_token_ids, load_target, load_tokenizer
from eval.claims import DIGEST, figures_digest
from eval.measure_export import export_entry, measure_together
from eval.prompts import Answer, MeasuredPrompts, measured_prompts, prompt_room, target_answers
from eval.proposers import load_proposer
from eval.vocabulary import tokenizer_matches
from heads.families import Export, ExportJob, Family, get_family, read_export
from heads.formats.fingerprint import served_files_hash
from heads.formats.staging import staged_directory
from train.errors import PipelineError
from train.eval_prompts import eval_conversations, training_overlap
from train.stages.run import Run
from train.stages.run_dir import read_json
from train.stages.train import SUMMARY

REPORT = "eval_report.json"


def answer_spans(dataset) -> list[list[int]]:
    """The distilled answers' tokens: each run of loss-masked (trained-on) tokens of a sample, in dataset order."""
    spans = []
    for ids, mask in zip(dataset["input_ids"], dataset["loss_mask"]):
        span: list[int] = []
        for token, kept in zip(ids, mask):
            if kept:
                span.append(token)
            elif span:
                spans.append(span)
                span = []
        if span:
            spans.append(span)
    return spans


def export_drafter(run: Run, family: Family, tokenizer, target) -> str:
    """Write drafter/ with the family's writer (whole or not at all); return its served-files hash."""
    cfg, paths = run.cfg, run.paths
    answers = tuple(answer_spans(load_distilled(paths.data))) if family.from_answers else ()
    job = ExportJob(
        checkpoint=paths.final if family.trainable else None,
        settings=cfg.drafter,
        tokenizer=tokenizer,
        # a verifier other tools load: the toy world's directory, not its alias (the revision is in drafthub.json)
        verifier={
            "name_or_path": resolve_target(cfg.target),
            "architectures": list(target.config.architectures or []),
        },
        num_speculative_tokens=cfg.eval.num_speculative_tokens,
        skip=(SUMMARY,),
        engines=family.optional_engines([*cfg.publish.engines, cfg.eval.serve]),
        answers=answers,
    )
    with staged_directory(paths.drafter) as tmp:
        family.export(job, tmp)
    return served_files_hash(paths.drafter)


def eval_prompt_ids(run: Run, tokenizer, max_len: int, answer: Optional[Answer] = None) -> tuple[MeasuredPrompts, dict]:
    """Held-out prompts (train/eval_prompts.py) through the target's chat template, with their categories, and what
    they are: their source and their overlap with the distilled dataset's prompts (0, or the gate refuses).

    answer: the target's answer to a prompt (eval.prompts.target_answers), for the later turns of `turns` rows."""
    cfg = run.cfg
    limit = cfg.eval.num_prompts + cfg.eval.warmup_prompts
    src, rows = eval_conversations(cfg, limit, tokenizer)  # a `turns` row gives a prompt per turn: at most limit
    prompts = measured_prompts(
        rows.conversations,
        tokenizer,
        limit=limit,
        max_len=max_len,
        overlong=cfg.eval.overlong_prompts,
        categories=rows.categories,
        answer=answer,
        repeat_block=cfg.eval.repeat_block,
    )
    measured = prompts.ids[: cfg.eval.num_prompts]  # the warm-up prompts are the first of these
    return prompts, src.as_dict() | {"count": len(measured)} | prompt_overlap(run, measured, src.description)


def prompt_overlap(run: Run, measured: list[list[int]], what: str) -> dict:
    """The measured prompts' overlap with the run's distilled dataset (train/eval_prompts.py: training_overlap);
    refused where there is any: a drafter is never measured on the prompts it was trained on."""
    dataset = load_distilled(run.paths.data) if read_json(run.paths.data / "manifest.json") else None
    found = training_overlap(measured, dataset)
    if found["overlap"]:
        raise PipelineError(
            f"{found['overlap']} of the {len(measured)} eval prompts ({what}) are in the distilled training "
            "data; measure on prompts the drafter was not trained on (eval_prompts=FILE or eval_split=SPLIT)"
        )
    return found


def headline(report: dict, paths) -> str:
    """The one line a run ends on: what the drafter achieved, and where its export and report are."""
    lossless = f"lossless on {report['lossless_prompts']}/{report['prompts']['count']} prompts"
    return (
        f"[eval] τ {report['tau']:.2f}, α {report['alpha']:.2f}, speed-up {report['speedup']:.2f}× at γ "
        f"{report['settings']['num_speculative_tokens']} ({lossless if report['lossless'] else 'NOT ' + lossless}); "
        f"drafter: {paths.drafter}, report: {paths.eval / 'report.md'}"
    )


def eval_stage(run: Run) -> dict:
    return eval_stages([run])[0]


def eval_stages(runs: list[Run]) -> list[dict]:
    """The eval stage of runs that share a target and eval prompts (a bake-off's contenders): the target loaded
    once, the prompts built once, and every drafter whose report is not still valid measured in one interleaved
    run against one shared baseline (eval.measure_export.measure_together). Each report lands in its own run's eval/."""
    families = [get_family(run.cfg.drafter.kind) for run in runs]
    reports = [_valid_report(run, family) for run, family in zip(runs, families)]
    todo = [(run, family) for run, family, report in zip(runs, families, reports) if report is None]
    if not todo:
        return reports
    first = todo[0][0]
    _check_one_world([run for run, _ in todo])
    if len(runs) > 1:  # a bake-off's contenders: say which are measured, which kept their reports
        kept = f" ({len(runs) - len(todo)} kept: their reports still hold)" if len(todo) < len(runs) else ""
        print(f"[eval] measuring together: {', '.join(run.cfg.recipe_name for run, _ in todo)}{kept}")
    for run, family in todo:
        check_inputs(run, family)  # before the target loads
    tokenizer = load_tokenizer(first.cfg.target)
    target = load_target(first.cfg.target, first.device)
    eos_ids, vocab_size = eos_token_ids(target, tokenizer), len(tokenizer)
    exported = [(export_drafter(run, family, tokenizer, target), run) for run, family in todo]
    exports = [read_export(run.paths.drafter) for _, run in exported]  # each export read once, handed down
    loaded = [load_proposer(e, target, vocab_size, run.cfg.eval, run.device) for e, (_, run) in zip(exports, exported)]
    answer = target_answers(target, first.cfg.eval, eos_ids=eos_ids, vocab_size=vocab_size)
    room = min(prompt_room(target, proposer, run.cfg.eval) for (proposer, _), (_, run) in zip(loaded, exported))
    prompts, measured = eval_prompt_ids(first, tokenizer, room, answer)
    entries = []
    for (proposer, kind), export, (export_sha256, run) in zip(loaded, exports, exported):
        overlap = prompt_overlap(run, prompts.ids[: run.cfg.eval.num_prompts], measured["what"])  # its data
        names = _names(run, kind, export_sha256, measured | overlap, tokenizer)
        entries.append(_entry(run, export, proposer, names))
    new = iter(measure_together(target, entries, prompts.ids, eos_ids, vocab_size, categories=prompts.categories))
    return [report if report is not None else next(new) for report in reports]


def _valid_report(run: Run, family: Family) -> Optional[dict]:
    """The run's eval report where it still holds (see _still_valid), else None."""
    done = read_json(run.paths.eval / REPORT)
    return done if done and _still_valid(done, run, family) else None


def check_inputs(run: Run, family: Family, made_before: frozenset = frozenset()) -> None:
    """Refuse a run without what its drafter is built from: a trained checkpoint of this run's settings, or the
    distilled answers a retrieval drafter indexes. made_before: the stages of this run that come before eval and
    will write them (preflight asks before the first stage runs, the eval stage again before the target loads)."""
    cfg, paths = run.cfg, run.paths
    if family.trainable and "train" not in made_before:
        summary = read_json(paths.final / SUMMARY)
        if summary is None:
            raise PipelineError(
                f"no trained drafter in {paths.final}; run the train stage first (stages=[{_with('train', cfg)}])"
            )
        if summary["stage_hash"] != run.hashes["train"]:
            raise PipelineError(
                f"{paths.final} was trained with other settings than this run's; re-run the train stage "
                f"(stages=[{_with('train', cfg)}])"
            )
    if family.from_answers and "distill" not in made_before and not read_json(paths.data / "manifest.json"):
        raise PipelineError(
            f"{cfg.drafter.kind} drafts from the distilled answers and {paths.data} holds none; "
            f"run the distill stage first (stages=[{_with('distill', cfg)}])"
        )


def _with(stage: str, cfg) -> str:
    """The run's stages with `stage` added in its place, as the fix to type."""
    from train.config import STAGES

    return ",".join(s for s in STAGES if s in {*cfg.stages, stage})


def _check_one_world(runs: list[Run]) -> None:
    """Runs measured together decode one target on one set of prompts: refuse any that differs (a bug if seen from
    a bake-off, which gives every contender its own)."""
    keys = ("target", "eval_split", "eval_prompts", "eval_prompts_column")
    for run in runs[1:]:
        for key in keys:
            if run.cfg_dict.get(key) != runs[0].cfg_dict.get(key):
                raise PipelineError(
                    f"{run.paths.root} and {runs[0].paths.root} differ in {key}; runs measured together share the "
                    "target and the eval prompts: evaluate them apart"
                )


def _names(run: Run, kind: str, export_sha256: str, measured: dict, tokenizer) -> dict:
    """The report's names: what was measured, with which settings, on which prompts."""
    cfg, paths = run.cfg, run.paths
    return {
        "target": cfg.target.name_or_path,
        "drafter": str(paths.drafter),
        "kind": kind,
        "stage_hash": run.stage_hash,
        "export_sha256": export_sha256,
        "checkpoint_sha256": served_files_hash(paths.final) if get_family(cfg.drafter.kind).trainable else None,
        "prompts": measured,
        "tokenizer_matches_target": tokenizer_matches(paths.drafter, tokenizer),
    }


def _entry(run: Run, export: Export, proposer, names: dict):
    """The run's export as one drafter of the measurement, its report written to the run's eval/."""
    cfg = run.cfg
    return export_entry(
        proposer,
        export,
        cfg.eval,
        names,
        out_dir=run.paths.eval,
        serve_target=resolve_target(cfg.target),  # a loadable path, not a toy world's alias
        trust_remote_code=cfg.target.trust_remote_code,
    )


def _still_valid(report: dict, run: Run, family: Family) -> bool:
    """The report measured this run's settings on the export and checkpoint now on disk."""
    paths = run.paths
    if report.get("stage_hash") != run.stage_hash or not report.get("export_sha256") or not paths.drafter.is_dir():
        return False
    if report.get(DIGEST) != figures_digest(report):
        return False  # edited by hand (or older than figure digests): measure again rather than pass it on
    if report["export_sha256"] != served_files_hash(paths.drafter):
        return False
    return not family.trainable or report.get("checkpoint_sha256") == served_files_hash(paths.final)
