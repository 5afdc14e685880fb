"""The family table: every drafter family, declared once for the heads layer.

A row says what the family is (schema, target signals, trainable or not), how its serving
directory is written from a native checkpoint or its settings, read back, and checked, how a
serving engine is configured for it, and what its model card says. train/setups.py and
eval/proposers.py hold the other layers' tables; tests/test_families.py walks every family
through all three, so a forgotten entry fails in CI, not in a user's run.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from heads import card
from heads.config import (
    DFlashConfig,
    DraftLMConfig,
    Eagle1Config,
    Eagle3Config,
    LayerSkipConfig,
    LookaheadConfig,
    MedusaConfig,
    NgramConfig,
    PardConfig,
    PEagleConfig,
    SuffixConfig,
)
from heads.dflash import DFlashDrafter, check_dflash_settings, check_dflash_target
from heads.draft_lm import DraftLM
from heads.eagle import Eagle3Drafter, eagle3_layer_ids
from heads.eagle1 import Eagle1Drafter
from heads.errors import HeadsError
from heads.formats.dflash_export import load_dflash, write_dflash
from heads.formats.dflash_vllm_cpu import served_patch as dflash_served_patch
from heads.formats.eagle_export import write_eagle3
from heads.formats.fingerprint import PROVENANCE_FILES
from heads.formats.medusa_original import is_original_medusa
from heads.formats.peagle_export import load_peagle, write_peagle
from heads.formats.speculators import check_speculators, load_speculators
from heads.layer_skip import LAYER_SKIP_KEY, LayerSkipDrafter, check_skip_layers
from heads.lookahead import LookaheadDrafter
from heads.medusa import MedusaHeads, check_medusa_settings
from heads.ngram import NgramDrafter
from heads.pard import MASK_KEY, PardDrafter, check_mask_token
from heads.peagle import PEagleDrafter
from heads.suffix import SuffixDrafter
from heads.target_features import default_eagle3_layers

SIGNALS = ("tokens", "final_normed", "layer_ids")  # none beyond the tokens; the lm_head input; layer_ids states
# the groups a registry's leaderboard filters by: what a user choosing a drafter compares
CATEGORIES = ("draft LM", "Medusa", "EAGLE", "parallel", "training-free")
CONFIG = "config.json"


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


@dataclass(frozen=True)
class Family:
    kind: str
    schema: type  # the drafter group's structured config
    signals: str  # one of SIGNALS
    trainable: bool  # False: no train stage; eval, serve and publish work from the settings alone
    category: str  # one of CATEGORIES (layer skipping counts as training-free: its "training" is a layer search)
    recognizes: Callable[[dict], bool]  # an export's config.json → is it this family's?
    write: Callable[[ExportJob, Path], None]  # fills an (empty, staged) export directory
    load: Callable[[Path, Any], Any]  # (export directory, target model) → drafter; HeadsError if unusable
    lint: Callable[[Path], Any]  # format checks of an export directory without a target (HeadsError); result unused
    vllm_method: Optional[str]  # vLLM's speculative method; None = vLLM does not serve this family
    vllm_config: Callable[[Path], dict]  # speculative_config keys besides method and γ
    library: str  # the model card's library_name
    usage: Callable[[str, int, dict], str]  # (target, γ, provenance) → the card's "Use it" section
    details: Callable[[dict], str]  # provenance → family-specific card section ("" = none)
    describe: Callable[[Path, dict], dict]  # (export directory, train summary) → provenance entries
    check: Callable[[Any], Any]  # drafter settings → HeadsError naming the first bad one; result unused
    # (drafter settings, the target's PretrainedConfig) → HeadsError for settings the target rules out (a
    # mask id outside its vocabulary, layer ids past its depth); run up front wherever the config can be read
    check_target: Callable[[Any, Any], Any] = lambda settings, target_config: None
    # export directory → context manager the served check starts vLLM inside (a family's workaround
    # for a known vLLM bug, e.g. DFlash's CPU k_norm); nullcontext = none
    serve_patch: Callable[[Path], AbstractContextManager] = lambda export_dir: nullcontext()
    # () → why vLLM cannot serve the family on this machine beyond vLLM itself (a missing package), or None
    serve_missing: Callable[[], Optional[str]] = lambda: None
    # True: the drafter drafts from earlier requests' outputs (suffix decoding's global tree), so the served
    # check sends vLLM the prompts one at a time, in eval order, as our batch-1 engine decodes them
    serve_in_order: bool = False

    def speculative_config(self, export_dir: Path, num_speculative_tokens: int) -> Optional[dict]:
        """vLLM's speculative_config for serving `export_dir`; None when vLLM does not serve the family."""
        if self.vllm_method is None:
            return None
        return {
            "method": self.vllm_method,
            **self.vllm_config(Path(export_dir)),
            "num_speculative_tokens": num_speculative_tokens,
        }


def _read_config(path: Path) -> dict:
    file = Path(path) / CONFIG
    return json.loads(file.read_text()) if file.is_file() else {}


def _copy_checkpoint(job: ExportJob, out: Path) -> None:
    """The writer of families whose native checkpoint already is the serving format: copy it whole
    (a draft LM's remote code and tokenizer files included), the trainer's bookkeeping left out."""
    shutil.copytree(job.checkpoint, out, ignore=shutil.ignore_patterns(*job.skip), dirs_exist_ok=True)
    if not (out / CONFIG).is_file():
        raise HeadsError(f"{job.checkpoint} holds no {CONFIG}; re-run the train stage")


def _write_draft_lm(job: ExportJob, out: Path) -> None:
    _copy_checkpoint(job, out)
    job.tokenizer.save_pretrained(out)  # transformers' assistant_model and vLLM's draft_model read it


def _write_eagle3(job: ExportJob, out: Path) -> None:
    write_eagle3(Eagle3Drafter.from_pretrained(job.checkpoint), out, job.verifier, job.num_speculative_tokens)


def _write_peagle(job: ExportJob, out: Path) -> None:
    write_peagle(PEagleDrafter.from_pretrained(job.checkpoint), out, job.verifier, job.num_speculative_tokens)


def _write_dflash(job: ExportJob, out: Path) -> None:
    write_dflash(DFlashDrafter.from_pretrained(job.checkpoint), out)


def _describe_dflash(export_dir: Path, summary: dict) -> dict:
    config = _read_config(export_dir)
    return {
        "drafter_config": {
            "layer_ids": config["eagle_aux_hidden_state_layer_ids"],
            "block_size": config["block_size"],
            "mask_token_id": config["dflash_config"]["mask_token_id"],
            "num_hidden_layers": config["num_hidden_layers"],
        }
    }


def _write_ngram(job: ExportJob, out: Path) -> None:
    NgramDrafter.from_config(job.settings).save_pretrained(out)


def _write_lookahead(job: ExportJob, out: Path) -> None:
    LookaheadDrafter.from_config(job.settings).save_pretrained(out)


def _write_suffix(job: ExportJob, out: Path) -> None:
    SuffixDrafter.from_config(job.settings).save_pretrained(out)


def _arctic_missing() -> Optional[str]:
    """vLLM's `suffix` method drafts with arctic-inference (its config check raises without it)."""
    from importlib.util import find_spec

    if find_spec("arctic_inference") is None:
        return "vLLM's suffix method needs arctic-inference (pip install arctic-inference==0.1.1; a source build)"
    return None


def _model_dir(export_dir: Path) -> dict:
    return {"model": str(export_dir)}


def _no_details(provenance: dict) -> str:
    return ""


def _nothing(export_dir: Path, summary: dict) -> dict:
    return {}


def _no_checks(settings) -> None:
    return None


SIZE_KEYS = ("hidden_size", "n_embd", "d_model")  # a causal LM's width, under its architecture's own key


def _is_causal_lm(config: dict) -> bool:
    """A plain HF causal LM (ours or anyone's), not one of the formats that reuse its architecture name."""
    architectures = config.get("architectures") or []
    return "drafthub_kind" not in config and any(str(a).endswith("ForCausalLM") for a in architectures)


def _is_draft_lm(config: dict) -> bool:
    # with a mask id it drafts in parallel (PARD); with a layer-skip record it is the target's own layers
    return _is_causal_lm(config) and MASK_KEY not in config and LAYER_SKIP_KEY not in config


def _is_layer_skip(config: dict) -> bool:
    return _is_causal_lm(config) and LAYER_SKIP_KEY in config


def _describe_layer_skip(export_dir: Path, summary: dict) -> dict:
    record = _read_config(export_dir)[LAYER_SKIP_KEY]
    return {"drafter_config": record, "layer_skip_search": summary.get("layer_skip_search")}


def _check_layer_skip(settings) -> None:
    if settings.num_speculative_tokens < 1 or settings.search_samples < 1 or settings.max_evaluations < 1:
        raise HeadsError(
            f"drafter.num_speculative_tokens={settings.num_speculative_tokens}, drafter.search_samples="
            f"{settings.search_samples} and drafter.max_evaluations={settings.max_evaluations} must all be ≥ 1"
        )
    if settings.fine_tune_steps < 0:
        raise HeadsError(f"drafter.fine_tune_steps={settings.fine_tune_steps} must be ≥ 0 (0 = no fine-tune)")


def _check_layer_skip_target(settings, target_config) -> None:
    if settings.skip_layers is not None:
        check_skip_layers(settings.skip_layers, target_config.num_hidden_layers)


def _is_pard(config: dict) -> bool:
    return _is_causal_lm(config) and MASK_KEY in config


def _check_pard(settings) -> None:
    if settings.max_draft_tokens < 2 or settings.anchors_per_sequence < 1:
        raise HeadsError(
            f"drafter.max_draft_tokens={settings.max_draft_tokens} must be ≥ 2 (one forward drafts the bonus slot "
            f"and ≥ 1 mask) and drafter.anchors_per_sequence={settings.anchors_per_sequence} ≥ 1"
        )
    if settings.pard_token is not None and settings.pard_token < 0:
        raise HeadsError(f"drafter.pard_token={settings.pard_token} must be a token id ≥ 0 (or null: picked)")


def _check_pard_target(settings, target_config) -> None:
    if settings.pard_token is not None:
        check_mask_token(settings.pard_token, target_config.vocab_size, "drafter.pard_token")


def _parallel_draft_model(export_dir: Path) -> dict:
    return {"model": str(export_dir), "parallel_drafting": True}


def _describe_pard(export_dir: Path, summary: dict) -> dict:
    config = _read_config(export_dir)
    return {"drafter_config": {"pard_token": config[MASK_KEY], "max_draft_tokens": config.get("max_draft_tokens")}}


def _describe_medusa(export_dir: Path, summary: dict) -> dict:
    return {"medusa": summary.get("medusa"), "drafter_config": _read_config(export_dir)}


def _describe_eagle3(export_dir: Path, summary: dict) -> dict:
    config = _read_config(export_dir)
    methods = config["speculators_config"]["proposal_methods"]
    return {
        "draft_vocab": summary.get("draft_vocab"),
        "drafter_config": {
            "layer_ids": config["eagle_aux_hidden_state_layer_ids"],
            "draft_vocab_size": config["draft_vocab_size"],
            "num_speculative_tokens": methods[0]["speculative_tokens"],
        },
    }


def _describe_ngram(export_dir: Path, summary: dict) -> dict:
    return {"drafter_config": _read_config(export_dir)}


def _check_eagle(settings) -> None:
    if settings.features not in ("online", "offline", "vllm"):
        raise HeadsError(
            f"drafter.features={settings.features!r}; use online (the target runs in each step), "
            "offline (features written to disk once) or vllm (written once by vLLM)"
        )


def _check_eagle3(settings) -> None:
    _check_eagle(settings)
    if settings.ttt_steps < 1 or settings.draft_vocab_size < 2:
        raise HeadsError(
            f"drafter.ttt_steps={settings.ttt_steps} must be ≥ 1 and "
            f"drafter.draft_vocab_size={settings.draft_vocab_size} ≥ 2"
        )


def _describe_peagle(export_dir: Path, summary: dict) -> dict:
    described = _describe_eagle3(export_dir, summary)
    config = _read_config(export_dir)
    described["drafter_config"] |= {
        "mask_token_id": config["mask_token_id"],
        "max_draft_tokens": config["max_draft_tokens"],
    }
    return described


def _check_peagle(settings) -> None:
    _check_eagle(settings)
    ids = settings.layer_ids
    if ids is not None and (len(ids) != 3 or list(ids) != sorted(set(ids))):
        raise HeadsError(
            f"drafter.layer_ids={list(ids)} must be 3 distinct ascending target layer ids "
            "(vLLM fuses the layers in layer order)"
        )
    if settings.max_draft_tokens < 2 or settings.anchors_per_sequence < 1 or settings.draft_vocab_size < 2:
        raise HeadsError(
            f"drafter.max_draft_tokens={settings.max_draft_tokens} must be ≥ 2 (the bonus slot and ≥ 1 mask), "
            f"drafter.anchors_per_sequence={settings.anchors_per_sequence} ≥ 1 and "
            f"drafter.draft_vocab_size={settings.draft_vocab_size} ≥ 2"
        )
    if settings.mask_token_id is not None and settings.mask_token_id < 0:
        raise HeadsError(f"drafter.mask_token_id={settings.mask_token_id} must be a token id ≥ 0 (or null: picked)")


def _check_peagle_target(settings, target_config) -> None:
    n = target_config.num_hidden_layers
    ids = list(settings.layer_ids) if settings.layer_ids is not None else default_eagle3_layers(n)
    if not all(0 <= i <= n for i in ids):
        raise HeadsError(
            f"drafter.layer_ids={ids} must lie in 0..{n} for this {n}-layer target"
            f"{'' if settings.layer_ids is not None else ' (the default [2, N//2, N−3]; set them explicitly)'}"
        )
    if settings.mask_token_id is not None:
        check_mask_token(settings.mask_token_id, target_config.vocab_size, "drafter.mask_token_id")


FAMILIES: dict[str, Family] = {
    family.kind: family
    for family in (
        Family(
            kind="draft_lm",
            schema=DraftLMConfig,
            signals="tokens",
            trainable=True,
            category="draft LM",
            recognizes=_is_draft_lm,
            write=_write_draft_lm,
            load=lambda path, target: DraftLM.from_pretrained(path),
            lint=DraftLM.from_pretrained,
            vllm_method="draft_model",
            vllm_config=_model_dir,
            library="transformers",
            usage=card.draft_lm_usage,
            details=_no_details,
            describe=_nothing,
            check=_no_checks,
        ),
        Family(
            kind="pard",
            schema=PardConfig,
            signals="tokens",
            trainable=True,
            category="parallel",
            recognizes=_is_pard,
            write=_write_draft_lm,  # the native checkpoint already is the HF directory vLLM loads
            load=lambda path, target: PardDrafter.from_pretrained(path),
            lint=PardDrafter.from_pretrained,
            vllm_method="draft_model",
            vllm_config=_parallel_draft_model,
            library="transformers",
            usage=card.pard_usage,
            details=_no_details,
            describe=_describe_pard,
            check=_check_pard,
            check_target=_check_pard_target,
        ),
        Family(
            kind="medusa",
            schema=MedusaConfig,
            signals="final_normed",
            trainable=True,
            category="Medusa",
            recognizes=lambda config: config.get("model_type") == "medusa",
            write=_copy_checkpoint,
            load=lambda path, target: MedusaHeads.from_pretrained(path),
            lint=MedusaHeads.from_pretrained,
            vllm_method="medusa",
            vllm_config=_model_dir,
            library="vllm",
            usage=card.medusa_usage,
            details=card.medusa_details,
            describe=_describe_medusa,
            check=check_medusa_settings,
        ),
        Family(
            kind="eagle3",
            schema=Eagle3Config,
            signals="layer_ids",
            trainable=True,
            category="EAGLE",
            recognizes=lambda config: config.get("speculators_model_type") == "eagle3",
            write=_write_eagle3,
            load=load_speculators,
            lint=check_speculators,
            vllm_method="eagle3",
            check_target=lambda settings, target_config: eagle3_layer_ids(settings, target_config.num_hidden_layers),
            vllm_config=_model_dir,
            library="vllm",
            usage=card.eagle3_usage,
            details=card.eagle3_details,
            describe=_describe_eagle3,
            check=_check_eagle3,
        ),
        Family(
            kind="peagle",
            schema=PEagleConfig,
            signals="layer_ids",
            trainable=True,
            category="parallel",
            recognizes=lambda config: config.get("speculators_model_type") == "peagle",
            write=_write_peagle,
            load=lambda path, target: load_peagle(path),
            lint=load_peagle,
            vllm_method="eagle3",
            vllm_config=_parallel_draft_model,
            library="vllm",
            usage=card.peagle_usage,
            details=card.eagle3_details,
            describe=_describe_peagle,
            check=_check_peagle,
            check_target=_check_peagle_target,
        ),
        Family(
            kind="eagle1",
            schema=Eagle1Config,
            signals="final_normed",
            trainable=True,
            category="EAGLE",
            recognizes=lambda config: config.get("drafthub_kind") == "eagle1",
            write=_copy_checkpoint,
            load=lambda path, target: Eagle1Drafter.from_pretrained(path, target.get_output_embeddings().weight),
            lint=Eagle1Drafter.check_export,
            vllm_method="eagle",
            vllm_config=_model_dir,
            library="vllm",
            usage=card.eagle1_usage,
            details=_no_details,
            describe=_nothing,
            check=_check_eagle,
        ),
        Family(
            kind="ngram",
            schema=NgramConfig,
            signals="tokens",
            trainable=False,
            category="training-free",
            recognizes=lambda config: config.get("drafthub_kind") == "ngram",
            write=_write_ngram,
            load=lambda path, target: NgramDrafter.from_pretrained(path),
            lint=NgramDrafter.from_pretrained,
            vllm_method="ngram",
            vllm_config=lambda export_dir: NgramDrafter.from_pretrained(export_dir).speculative_config(),
            library="vllm",
            usage=card.ngram_usage,
            details=_no_details,
            describe=_describe_ngram,
            check=NgramDrafter.from_config,
        ),
        Family(
            kind="suffix",
            schema=SuffixConfig,
            signals="tokens",
            trainable=False,
            category="training-free",
            recognizes=lambda config: config.get("drafthub_kind") == "suffix",
            write=_write_suffix,
            load=lambda path, target: SuffixDrafter.from_pretrained(path),
            lint=SuffixDrafter.from_pretrained,
            vllm_method="suffix",
            vllm_config=lambda export_dir: SuffixDrafter.from_pretrained(export_dir).settings(),
            library="vllm",
            usage=card.suffix_usage,
            details=_no_details,
            describe=_describe_ngram,  # the settings are the whole drafter
            check=SuffixDrafter.from_config,
            serve_missing=_arctic_missing,
            serve_in_order=True,
        ),
        Family(
            kind="lookahead",
            schema=LookaheadConfig,
            signals="tokens",
            trainable=False,
            category="training-free",
            recognizes=lambda config: config.get("drafthub_kind") == "lookahead",
            write=_write_lookahead,
            load=lambda path, target: LookaheadDrafter.from_pretrained(path),
            lint=LookaheadDrafter.from_pretrained,
            vllm_method=None,  # vLLM has no lookahead decoding method
            vllm_config=lambda export_dir: {},
            library="transformers",
            usage=card.lookahead_usage,
            details=_no_details,
            describe=_describe_ngram,  # the settings are the whole drafter
            check=LookaheadDrafter.from_config,
        ),
        Family(
            kind="layer_skip",
            schema=LayerSkipConfig,
            signals="tokens",
            trainable=True,  # its train stage is the skip search (+ an optional fine-tune)
            category="training-free",
            recognizes=_is_layer_skip,
            write=_write_draft_lm,  # the native checkpoint already is the HF causal LM consumers load
            load=lambda path, target: LayerSkipDrafter.from_pretrained(path),
            lint=LayerSkipDrafter.from_pretrained,
            vllm_method="draft_model",
            vllm_config=_model_dir,
            library="transformers",
            usage=card.draft_lm_usage,
            details=card.layer_skip_details,
            describe=_describe_layer_skip,
            check=_check_layer_skip,
            check_target=_check_layer_skip_target,
        ),
        Family(
            kind="dflash",
            schema=DFlashConfig,
            signals="layer_ids",
            trainable=True,
            category="parallel",
            recognizes=lambda config: config.get("architectures") == ["DFlashDraftModel"],
            write=_write_dflash,
            load=load_dflash,  # (path, target): the target's embeddings and lm_head are shared
            lint=load_dflash,
            vllm_method="dflash",
            vllm_config=_model_dir,
            library="vllm",
            usage=card.dflash_usage,
            details=_no_details,
            describe=_describe_dflash,
            check=check_dflash_settings,
            check_target=check_dflash_target,
            serve_patch=dflash_served_patch,
        ),
    )
}


def get_family(kind: str) -> Family:
    """The family table's row for `kind`; one clear error naming the known kinds otherwise."""
    try:
        return FAMILIES[kind]
    except KeyError:
        raise HeadsError(
            f"drafter.kind={kind!r} has no entry in the family table (heads/families.py FAMILIES); "
            f"known kinds: {sorted(FAMILIES)}"
        ) from None


def family_of_export(path: str | Path) -> Family:
    """The family whose export `path` is, from its config.json (exactly one family must recognise it)."""
    config_file = Path(path) / CONFIG
    if not config_file.is_file():
        raise HeadsError(f"{path} is not an exported drafter (no {CONFIG}); pass the drafter/ directory a run wrote")
    config = json.loads(config_file.read_text())
    if is_original_medusa(config):  # before the causal-LM check: a Medusa-2 full model names its base architecture
        raise HeadsError(
            f"{path} holds Medusa heads in FasterDecoding/Medusa's original layout; convert them first: "
            f"python scripts/convert_medusa.py {path} CONVERTED_DIR --target TARGET"
        )
    if _is_causal_lm(config) and not (set(SIZE_KEYS) & set(config) and "vocab_size" in config):
        raise HeadsError(
            f"{config_file} names {config['architectures']} but no model size ({'/'.join(SIZE_KEYS)} and vocab_size); "
            "it would build the architecture's default-size model: save the drafter with save_pretrained"
        )
    matches = [family for family in FAMILIES.values() if family.recognizes(config)]
    if len(matches) != 1:
        found = "no family" if not matches else f"several families ({[f.kind for f in matches]})"
        raise HeadsError(f"{config_file} is recognised by {found}; known kinds: {sorted(FAMILIES)}")
    return matches[0]


def usage_text(provenance: dict, target: Optional[str] = None, export_dir: Optional[str] = None) -> str:
    """The family's "Use it" section (markdown): as the model card prints it (THIS_DIRECTORY, the target's name),
    or exact for one copy of the drafter (`export_dir`, and `target` as loadable where it is served)."""
    ev = provenance.get("eval") or {}
    gamma = ev.get("recommended_num_speculative_tokens") or ev.get("settings", {}).get("num_speculative_tokens", 4)
    text = get_family(provenance["kind"]).usage(target or provenance["target"]["name_or_path"], gamma, provenance)
    return text if export_dir is None else text.replace("THIS_DIRECTORY", export_dir)


def model_card(provenance: dict) -> str:
    """README.md for an export: the generic card with the family's usage and details sections."""
    family = get_family(provenance["kind"])
    return card.render_model_card(
        provenance, library=family.library, usage=usage_text(provenance), details=family.details(provenance)
    )


def write_provenance(
    export_dir: str | Path, provenance: dict, samples_text: Optional[str] = None, card: bool = True
) -> None:
    """Add drafthub.json, the model card (card=True) and the eval samples (given) to an export directory, atomically.

    No serving engine reads them (heads.formats.fingerprint leaves them out of the served-files
    hash), so adding them keeps the directory the served check ran byte for byte."""
    root = Path(export_dir)
    files = [(PROVENANCE_FILES[0], json.dumps(provenance, indent=2))]
    if card:
        files.append((PROVENANCE_FILES[1], model_card(provenance)))
    if samples_text is not None:
        files.insert(0, (PROVENANCE_FILES[2], samples_text))  # first: drafthub.json's report binds it
    for name, text in files:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}-", dir=root.parent)  # outside: a crash leaves no stray file inside
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the card from other users of a shared registry
        os.replace(tmp, root / name)
