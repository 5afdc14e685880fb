"""What a family row is (`Family`), what its writer is given (`ExportJob`), and the helpers several
families' rows share. The rows themselves live beside their code, one file per family."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from heads.errors import HeadsError
from heads.formats import ENGINE_NAMES, Consumer

SIGNALS = ("tokens", "final_normed", "layer_ids")  # none beyond the tokens; the lm_head input; layer_ids states
# the groups a registry's leaderboard filters by: what a user choosing a drafter compares
CATEGORIES = ("draft LM", "Medusa", "EAGLE", "parallel", "training-free")
CONFIG = "config.json"
SIZE_KEYS = ("hidden_size", "n_embd", "d_model")  # a causal LM's width, under its architecture's own key


@dataclass(frozen=True)
class ExportJob:
    """What a writer needs to turn a native checkpoint (or a training-free family's settings) into
    the directory consumers load."""

    checkpoint: Optional[Path]  # native checkpoint directory; None for a training-free family
    settings: Any  # the drafter's config (its family's schema)
    tokenizer: Any  # the target's tokenizer (draft LMs ship it)
    verifier: dict  # {"name_or_path", "architectures"} of the target (formats that name it)
    num_speculative_tokens: int  # γ, where a format carries a default one (speculators)
    skip: tuple[str, ...] = ()  # files of the checkpoint that are the trainer's bookkeeping, not the drafter's
    engines: tuple[str, ...] = ()  # optional consumers whose layout is asked for (Consumer.optional), e.g. llamacpp
    answers: tuple = ()  # the distilled answers' token ids, for a family built from them (Family.from_answers)


def no_text(provenance: dict) -> str:
    return ""


def nothing_described(export_dir: Path, summary: dict) -> dict:
    return {}


def no_checks(settings) -> None:
    return None


def no_target_checks(settings, target_config) -> None:
    return None


def same_gamma(gamma: int, provenance: dict) -> int:
    return gamma


@dataclass(frozen=True)
class Family:
    """One drafter family for the heads layer: what it is, how its export is written, read back and
    checked, which engines serve that export, and what its model card says. Optional fields default to
    "nothing family-specific", so a row states only what differs."""

    kind: str
    schema: type  # the drafter group's structured config
    signals: str  # one of SIGNALS
    trainable: bool  # False: no train stage; eval, serve and publish work from the settings alone
    category: str  # one of CATEGORIES (layer skipping counts as training-free: its "training" is a layer search)
    recognizes: Callable[[dict], bool]  # an export's config.json → is it this family's?
    write: Callable[[ExportJob, Path], None]  # fills the export's root (the consumers' subdirs come after)
    load: Callable[[Path, Any], Any]  # (export directory, target model) → drafter; HeadsError if unusable
    lint: Callable[[Path], Any]  # format checks of an export directory without a target (HeadsError); result unused
    library: str  # the model card's library_name
    consumers: tuple[Consumer, ...] = ()  # the engines that load the export as it is, in the card's order
    about: Callable[[dict], str] = no_text  # provenance → what to know before serving it (the card's "Use it")
    details: Callable[[dict], str] = no_text  # provenance → family-specific card section ("" = none)
    describe: Callable[[Path, dict], dict] = nothing_described  # (export dir, train summary) → provenance entries
    check: Callable[[Any], Any] = no_checks  # drafter settings → HeadsError naming the first bad one
    # (drafter settings, the target's PretrainedConfig) → HeadsError for settings the target rules out (a
    # mask id outside its vocabulary, layer ids past its depth); run up front wherever the config can be read
    check_target: Callable[[Any, Any], Any] = no_target_checks
    # (recommended γ, provenance) → the γ engines are told for this export (Medusa: its head count; a block
    # drafter: at most the block it was trained for)
    serving_gamma: Callable[[int, dict], int] = same_gamma
    # True: the export is built from the distilled answers (ExportJob.answers), so the run distils even though the
    # family trains nothing (retrieval)
    from_answers: bool = False

    def consumer(self, engine: str) -> Consumer:
        """The family's consumer for `engine`; one clear error naming the engines that serve it otherwise."""
        for consumer in self.consumers:
            if consumer.engine == engine:
                return consumer
        engines = [c.engine for c in self.consumers] or "none"
        raise HeadsError(f"no {engine} consumer serves {self.kind} drafters (engines that do: {engines})")

    def not_served(self, engine: str) -> Optional[str]:
        """Why drafthub cannot start `engine` on this family's export here; None = the served check can run."""
        consumer = next((c for c in self.consumers if c.engine == engine), None)
        if consumer is None:
            return f"{ENGINE_NAMES.get(engine, engine)} does not serve {self.kind} drafters"
        return consumer.missing() or (None if consumer.checked else f"drafthub does not start {engine}")

    def optional_engines(self, asked) -> tuple[str, ...]:
        """The engines among `asked` (publish.engines, eval.serve) whose optional layout this family's export gets."""
        return tuple(c.engine for c in self.consumers if c.optional and c.engine in asked)

    def export(self, job: ExportJob, out: Path) -> None:
        """Fill a (staged, empty) export directory: the family's files, then each consumer's own layout."""
        self.write(job, out)
        for consumer in self.consumers:
            if consumer.write is not None and (not consumer.optional or consumer.engine in job.engines):
                consumer.write(job, out / consumer.subdir if consumer.subdir else out)


def read_config(path: Path) -> dict:
    file = Path(path) / CONFIG
    return json.loads(file.read_text()) if file.is_file() else {}


def copy_checkpoint(job: ExportJob, out: Path) -> None:
    """The writer of families whose native checkpoint already is the serving format: copy it whole
    (a draft LM's remote code and tokenizer files included), the trainer's bookkeeping left out."""
    shutil.copytree(job.checkpoint, out, ignore=shutil.ignore_patterns(*job.skip), dirs_exist_ok=True)
    if not (out / CONFIG).is_file():
        raise HeadsError(f"{job.checkpoint} holds no {CONFIG}; re-run the train stage")


def copy_with_tokenizer(job: ExportJob, out: Path) -> None:
    copy_checkpoint(job, out)
    job.tokenizer.save_pretrained(out)  # transformers' assistant_model and vLLM's draft_model read it


def is_causal_lm(config: dict) -> bool:
    """A plain HF causal LM (ours or anyone's), not one of the formats that reuse its architecture name."""
    architectures = config.get("architectures") or []
    return "drafthub_kind" not in config and any(str(a).endswith("ForCausalLM") for a in architectures)


def settings_described(export_dir: Path, summary: dict) -> dict:
    """A training-free drafter's settings are the whole drafter."""
    return {"drafter_config": read_config(export_dir)}
