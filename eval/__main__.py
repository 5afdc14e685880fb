"""`python -m eval drafter_dir=DIR prompts=FILE_OR_DATASET out_dir=DIR [target_path=NAME_OR_PATH] [split=NAME]`.

Measures an exported drafter directory (any family in heads/families/) against its target (read from the
drafter's drafthub.json unless given) and writes eval_report.json, eval_samples.jsonl and report.md into out_dir;
the drafter directory is written only with record=true. Prompts are read as distillation reads them
(distill/prompts/read.py: JSONL, JSON, parquet, dataset directories, Hub names; messages, ShareGPT, turns, prompt) and
templated exactly as the pipeline's eval stage templates them (eval/prompts.py): a `turns` row is measured turn by
turn, each turn's prompt holding the target's own answers to the turns before. A drafter with a card
(drafthub.json) is measured at the γ its card serves, without a sweep, unless eval.num_speculative_tokens or
eval.gamma_sweep is given.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import MISSING, OmegaConf

from conf.cli import explained, run_cli
from eval.config import EvalConfig
from eval.errors import EvalError
from heads.card import speed_warnings

SERVED_SUMMARY = ("engine", "tau", "per_position_acceptance", "equal_prompts", "verdict", "speedup", "speedup_spread")
LOAD_SUMMARY = ("concurrency", "throughput_speedup", "tpot_speedup", "served_tau", "pays")


@dataclass
class EvalAppConfig:
    drafter_dir: str = MISSING  # exported drafter directory (a run's drafter/, in its family's serving format)
    # conversations ({"messages": [...]}, ShareGPT, {"turns": [...]}, {"prompt": "..."}): a .jsonl(.gz)/.json/.parquet
    # file, a dataset directory, a Hub name
    prompts: str = MISSING
    split: Optional[str] = None  # the dataset split to read; None = its only split (a file has none)
    # the column holding the prompts, read by what it holds (a string, a list of strings = turns, messages,
    # ShareGPT turns); None = the first of messages, conversations, turns, prompt
    prompts_column: Optional[str] = None
    out_dir: str = MISSING  # where the report goes
    target_path: Optional[str] = None  # target name or path (a .gguf file too); None = the one in drafthub.json
    target_gguf_file: Optional[str] = None  # a GGUF file inside target_path (a directory or Hub repo)
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    trust_remote_code: bool = False  # only for targets whose code you trust
    # the prompts' Jinja template, or a file holding it (….jinja); None = the drafter's training template
    # (drafthub.json), else the tokenizer's
    chat_template: Optional[str] = None
    # vllm | llamacpp = also serve drafter_dir with that engine and compare (shorthand for eval.serve=ENGINE)
    serve: Optional[str] = None
    # also write drafthub.json (this report, bound to the files) and the samples into drafter_dir, so that the
    # publish gate accepts a drafter made elsewhere; false = write only out_dir (drafter_dir may not be yours)
    record: bool = False
    eval: EvalConfig = field(default_factory=EvalConfig)


ConfigStore.instance().store(name="eval_schema", node=EvalAppConfig)


def _provenance(drafter: Path) -> dict:
    prov = drafter / "drafthub.json"
    return json.loads(prov.read_text()) if prov.exists() else {}


def _target_of(drafter: Path) -> str:
    target = _provenance(drafter).get("target")
    if not target:
        raise EvalError(f"{drafter} has no drafthub.json to name its target; pass target_path=<name or path>")
    return target.get("resolved") or target["name_or_path"]


def _chat_template(app: "EvalAppConfig", drafter: Path, tokenizer) -> None:
    """Template the prompts as in training: the given template, the recipe's, or the tokenizer's own."""
    recipe_template = ((_provenance(drafter).get("recipe") or {}).get("target") or {}).get("chat_template")
    from distill.prompts.chat import template_text

    given = template_text(app.chat_template, "chat_template")
    tokenizer.chat_template = given or recipe_template or tokenizer.chat_template  # none: raw text prompts only


def _record(drafter: Path, report: dict, out_dir: Path, target_name: str, from_provenance: bool) -> None:
    """drafthub.json and eval_samples.jsonl in the drafter directory: what the publish gate needs from any drafter.

    An existing drafthub.json keeps its other fields (its recipe, training data) and gets this report; a
    drafter made elsewhere gets a new one. A README.md drafthub did not write is never replaced."""
    import time

    from heads.families import get_family, write_provenance
    from heads.formats.fingerprint import LOAD_PLOT_FILE, SAMPLES_FILE

    prov = _provenance(drafter)
    ours = bool(prov)
    if not ours:
        family = get_family(report["kind"])
        prov = {
            "kind": family.kind,
            "model_name": drafter.resolve().name,
            **family.describe(drafter, {}),
        }
    if not from_provenance or "target" not in prov:
        prov["target"] = {"name_or_path": target_name, "resolved": target_name, "revision": None}
    prov |= {
        "eval": report,
        "export_sha256": report["export_sha256"],
        "evaluated_by": "python -m eval",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    card = ours or not (drafter / "README.md").exists()
    try:
        plot = out_dir / LOAD_PLOT_FILE
        load_plot = plot.read_bytes() if report.get("serving_load") and plot.exists() else None
        write_provenance(drafter, prov, (out_dir / SAMPLES_FILE).read_text(), card=card, load_plot=load_plot)
    except OSError as e:
        raise EvalError(
            f"cannot write drafthub.json into {drafter} ({e.strerror}); leave out record=true (the report is in "
            f"{out_dir})"
        ) from None
    print(f"recorded this report in {drafter / 'drafthub.json'}: the publish gate can now check it")


def _resolved_target(target_name: str, gguf_file: Optional[str]) -> str:
    """A GGUF file or packaged target as the directory it is dequantized into once (distill/targets/); a toy
    world's alias is refused in _load_target (it would build a world); other names as given."""
    from distill.targets import TargetRef, resolve_target, source_of, toyworld

    ref = TargetRef(target_name, gguf_file)
    return target_name if source_of(ref) in (None, toyworld) else resolve_target(ref)


def _load_target(app: EvalAppConfig, drafter: Path, target_name: str):
    """The tokenizer (templated as in training) and the target, loaded as the pipeline loads it."""
    import torch
    from transformers import AutoTokenizer

    from distill.config import TargetConfig
    from distill.targets.load import load_target, no_safetensors

    device = torch.device(app.device if app.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))
    if target_name.startswith("toyworld:"):
        raise EvalError(
            f"target_path={target_name} is a python -m train alias; pass the toy world's directory "
            "(drafthub.json's target.resolved)"
        )
    if problem := no_safetensors(target_name, "target_path"):
        raise problem  # before the tokenizer and the weights load
    try:
        tokenizer = AutoTokenizer.from_pretrained(target_name, trust_remote_code=app.trust_remote_code)
    except (OSError, ValueError) as e:
        raise EvalError(
            f"could not load the target {target_name!r} ({str(e).splitlines()[0]}); "
            "pass target_path=<a local HF directory or a Hub id>"
        ) from None
    _chat_template(app, drafter, tokenizer)
    # dtype auto: the checkpoint's own, as python -m eval has always loaded it
    settings = TargetConfig(name_or_path=target_name, dtype="auto", trust_remote_code=app.trust_remote_code)
    return tokenizer, load_target(settings, device, setting="target_path")


def _names(drafter: Path, target_name: str, kind: str, tokenizer) -> dict:
    """The report's names: what was measured against what, and the export's hash the gate checks."""
    from eval.vocabulary import tokenizer_matches
    from heads.formats.fingerprint import served_files_hash

    return {
        "target": target_name,
        "drafter": str(drafter),
        "kind": kind,
        "export_sha256": served_files_hash(drafter),
        "tokenizer_matches_target": tokenizer_matches(drafter, tokenizer),  # the gate refuses False
    }


def _summarize(report: dict) -> None:
    """One JSON line of the headline figures on stdout, warnings on stderr; exit 3 when serving broke it."""
    summary = {
        k: report[k]
        for k in ("tau", "alpha", "speedup", "predicted_speedup", "lossless", "recommended_num_speculative_tokens")
    }
    summary["speedup_interval"] = [report["speedup_spread"]["low"], report["speedup_spread"]["high"]]
    summary["timing_noisy"], summary["engine"] = report["timing"]["noisy"], report["engine"]["path"]
    if "served" in report:
        summary["served"] = {k: report["served"][k] for k in SERVED_SUMMARY if k in report["served"]}
    if "serving_load" in report:
        load = report["serving_load"]
        summary["serving_load"] = {
            "break_even": load["break_even"]["verdict"],
            "levels": [{k: lv[k] for k in LOAD_SUMMARY} for lv in load["levels"]],
        }
    for warning in speed_warnings(report):
        print(f"warning: {warning}", file=sys.stderr)
    print(json.dumps(summary))
    if report.get("served", {}).get("verdict") == "broken":
        print(f"error: the served check failed: {report['served']['reason']}", file=sys.stderr)
        sys.exit(3)


def _at_the_cards_gamma(settings: EvalConfig, drafter: Path, overrides: list[str]) -> None:
    """A published drafter is measured at the γ its card serves, one γ, unless the command line sets γ or a sweep:
    a figure beside the card's must be the same measurement (the sweep stays available as eval.gamma_sweep=[…])."""
    from heads.families import serving_gamma

    provenance = _provenance(drafter)
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    if "kind" not in provenance or "eval" not in provenance:
        return
    if "eval.num_speculative_tokens" not in given:
        settings.num_speculative_tokens = serving_gamma(provenance)
        print(
            f"γ {settings.num_speculative_tokens}: the γ {drafter}'s card serves (eval.num_speculative_tokens=N "
            "measures another)"
        )
    if "eval.gamma_sweep" not in given:
        settings.gamma_sweep = []


def _check_out_dir(out_dir: Path, drafter: Path) -> None:
    """The report never lands in the export: its eval_samples.jsonl and speculation_profile.json are the export's own
    (what the publish gate checks), and only record=true may change them."""
    out, export = out_dir.resolve(), drafter.resolve()
    if out == export or export in out.parents:
        where = "is the drafter directory" if out == export else f"is inside the drafter directory {drafter}"
        raise EvalError(
            f"out_dir={out_dir} {where}: the report would overwrite the export's files; pass another out_dir "
            "(record=true then records the report in the drafter directory for the publish gate)"
        )


@hydra.main(config_path="pkg://conf", config_name="eval", version_base=None)
@explained
def main(cfg) -> None:
    from distill.errors import DistillError
    from distill.prompts.read import read_prompts
    from distill.targets.load import eos_token_ids
    from eval.measure_export import measure_export
    from eval.prompts import measured_prompts, prompt_room, target_answers
    from eval.proposers import load_proposer
    from eval.serving import preflight
    from heads.errors import HeadsError
    from heads.families import read_export

    app: EvalAppConfig = OmegaConf.to_object(cfg)
    app.eval.serve = app.serve or app.eval.serve
    try:
        drafter = Path(app.drafter_dir)
        if not drafter.is_dir():
            raise EvalError(f"drafter_dir={drafter} is not a directory; pass an exported drafter directory")
        _at_the_cards_gamma(app.eval, drafter, HydraConfig.get().overrides.task)
        _check_out_dir(Path(app.out_dir), drafter)
        rows = read_prompts(app.prompts, app.split, column=app.prompts_column, prompts_key="prompts", split_key="split")
        rows = rows.across_categories()  # as the pipeline's eval takes them: every category within eval.num_prompts
        export = read_export(drafter)  # read once; a directory no family reads is refused before the target loads
        preflight(app.eval, export)  # the served check's and load sweep's own refusals, before the target loads
        target_name = _resolved_target(app.target_path or _target_of(drafter), app.target_gguf_file)
        tokenizer, target = _load_target(app, drafter, target_name)
        proposer, kind = load_proposer(export, target, len(tokenizer), app.eval, target.device)
        limit, room = app.eval.num_prompts + app.eval.warmup_prompts, prompt_room(target, proposer, app.eval)
        eos_ids, vocab_size = eos_token_ids(target, tokenizer), len(tokenizer)
        prompts = measured_prompts(
            rows.conversations,
            tokenizer,
            limit=limit,
            max_len=room,
            overlong=app.eval.overlong_prompts,
            categories=rows.categories,
            answer=target_answers(target, app.eval, eos_ids=eos_ids, vocab_size=vocab_size),
            repeat_block=app.eval.repeat_block,
        )
        names = _names(drafter, target_name, kind, tokenizer)
        report = measure_export(
            target,
            proposer,
            export,
            prompts.ids,
            app.eval,
            names,
            vocab_size=vocab_size,
            eos_ids=eos_ids,
            out_dir=app.out_dir,
            trust_remote_code=app.trust_remote_code,
            categories=prompts.categories,
        )
        if app.record:
            _record(drafter, report, Path(app.out_dir), target_name, app.target_path is None)
        elif not (drafter / "drafthub.json").exists():
            print(
                f"{drafter} has no drafthub.json, so the publish gate refuses it; to record this report there "
                "(drafthub.json, eval_samples.jsonl) for the gate, run again with record=true"
            )
    except (EvalError, HeadsError, DistillError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    _summarize(report)


# nothing of a measurement survives it (the report is written whole, at the end): a rerun measures from the start
main.interrupted_line = "interrupted; python -m eval does not resume: rerun the same command to measure from the start"

if __name__ == "__main__":
    run_cli(main)
