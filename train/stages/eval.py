"""The eval stage: export the drafter once into drafter/, measure that directory with our engine,
serve the same directory with vLLM when asked (eval.serve=vllm), and record the export's hash."""

from __future__ import annotations

from typing import Optional

from distill.shards import load_distilled
from distill.target import eos_token_ids, load_target, load_tokenizer
from distill.targets import resolve_target
from eval.claims import DIGEST, figures_digest
from eval.measure_export import measure_export
from eval.prompts import Answer, MeasuredPrompts, measured_prompts, prompt_room, target_answers
from eval.proposers import load_proposer
from eval.vocabulary import tokenizer_matches
from heads.families import ExportJob, Family, get_family
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
    dataset = load_distilled(run.paths.data) if read_json(run.paths.data / "manifest.json") else None
    measured = prompts.ids[: cfg.eval.num_prompts]  # the warm-up prompts are the first of these
    return prompts, src.as_dict() | {"count": len(measured)} | training_overlap(measured, dataset)


def headline(report: dict, paths) -> str:
    """The one line a run ends on: what the drafter achieved, and where its export and report are."""
    lossless = f"lossless on {report['lossless_prompts']}/{report['prompts']['count']} prompts"
    return (
        f"[eval] τ {report['tau']:.2f}, α {report['alpha']:.2f}, speed-up {report['speedup']:.2f}× at γ "
        f"{report['settings']['num_speculative_tokens']} ({lossless if report['lossless'] else 'NOT ' + lossless}); "
        f"drafter: {paths.drafter}, report: {paths.eval / 'report.md'}"
    )


def eval_stage(run: Run) -> dict:
    cfg, paths = run.cfg, run.paths
    family = get_family(cfg.drafter.kind)
    done = read_json(paths.eval / REPORT)
    if done and _still_valid(done, run, family):
        return done
    if family.trainable:
        summary = read_json(paths.final / SUMMARY)
        if summary is None:
            raise PipelineError(f"no trained drafter in {paths.final}; run the train stage first")
        if summary["stage_hash"] != run.hashes["train"]:
            raise PipelineError(
                f"{paths.final} was trained with other settings than this run's; re-run the train stage "
                "(stages=[train,eval,publish])"
            )
    if family.from_answers and not read_json(paths.data / "manifest.json"):  # before the target loads
        raise PipelineError(
            f"{cfg.drafter.kind} drafts from the distilled answers and {paths.data} holds none; "
            "run the distill stage first (stages=[distill,eval,publish])"
        )
    tokenizer = load_tokenizer(cfg.target)
    target = load_target(cfg.target, run.device)
    export_sha256 = export_drafter(run, family, tokenizer, target)
    proposer, kind = load_proposer(paths.drafter, target, len(tokenizer), cfg.eval, run.device)
    eos_ids, vocab_size = eos_token_ids(target, tokenizer), len(tokenizer)
    answer = target_answers(target, cfg.eval, eos_ids=eos_ids, vocab_size=vocab_size)
    prompts, measured = eval_prompt_ids(run, tokenizer, prompt_room(target, proposer, cfg.eval), answer)
    if measured["overlap"]:
        raise PipelineError(
            f"{measured['overlap']} of the {measured['count']} eval prompts ({measured['what']}) are in the distilled "
            "training data; measure on prompts the drafter was not trained on (eval_prompts=FILE or eval_split=SPLIT)"
        )
    names = {
        "target": cfg.target.name_or_path,
        "drafter": str(paths.drafter),
        "kind": kind,
        "stage_hash": run.stage_hash,
        "export_sha256": export_sha256,
        "checkpoint_sha256": served_files_hash(paths.final) if family.trainable else None,
        "prompts": measured,
        "tokenizer_matches_target": tokenizer_matches(paths.drafter, tokenizer),
    }
    return measure_export(
        target,
        proposer,
        paths.drafter,
        prompts.ids,
        cfg.eval,
        names,
        vocab_size=vocab_size,
        eos_ids=eos_ids,
        out_dir=paths.eval,
        serve_target=resolve_target(cfg.target),  # a loadable path, not a toy world's alias
        trust_remote_code=cfg.target.trust_remote_code,
        categories=prompts.categories,
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
