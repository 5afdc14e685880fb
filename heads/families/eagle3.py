"""EAGLE-3: one decoder layer over fused target features (low, middle, high layers), trained with
training-time test; exported in the speculators format vLLM serves, plus SGLang's layout."""

from __future__ import annotations

from pathlib import Path

from heads.config import Eagle3Config
from heads.eagle import Eagle3Drafter, eagle3_layer_ids
from heads.errors import HeadsError
from heads.families.base import ExportJob, Family, read_config
from heads.formats import llamacpp, sglang, vllm
from heads.formats.speculators import check_speculators, load_speculators, save_speculators


def write(job: ExportJob, out: Path) -> None:
    """The speculators files vLLM serves as they are (linted first)."""
    drafter = Eagle3Drafter.from_pretrained(job.checkpoint)
    save_speculators(drafter, out, job.verifier, job.num_speculative_tokens)


def describe(export_dir: Path, summary: dict) -> dict:
    config = read_config(export_dir)
    methods = config["speculators_config"]["proposal_methods"]
    return {
        "draft_vocab": summary.get("draft_vocab"),
        "drafter_config": {
            "layer_ids": config["eagle_aux_hidden_state_layer_ids"],
            "draft_vocab_size": config["draft_vocab_size"],
            "num_speculative_tokens": methods[0]["speculative_tokens"],
        },
    }


def check_features(settings) -> None:
    """Where the target's features come from (shared by every EAGLE family)."""
    if settings.features not in ("online", "offline", "vllm"):
        raise HeadsError(
            f"drafter.features={settings.features!r}; use online (the target runs in each step), "
            "offline (features written to disk once) or vllm (written once by vLLM)"
        )


def _check(settings) -> None:
    check_features(settings)
    if settings.ttt_steps < 1 or settings.draft_vocab_size < 2:
        raise HeadsError(
            f"drafter.ttt_steps={settings.ttt_steps} must be ≥ 1 and "
            f"drafter.draft_vocab_size={settings.draft_vocab_size} ≥ 2"
        )


def details(provenance: dict) -> str:
    """Fused target layers and the draft vocabulary's coverage."""
    vocab, drafter = provenance.get("draft_vocab"), provenance.get("drafter_config") or {}
    if not vocab:
        return ""
    return f"""

Target layers fused: {drafter.get("layer_ids")} (HF `output_hidden_states` indices). Draft vocabulary:
{vocab["draft_vocab_size"]} tokens, covering {vocab["coverage"]:.1%} of the distilled answers' tokens."""


def _about(provenance: dict) -> str:
    return """The root of this directory is the speculators format vLLM serves as it is. drafthub's engine
also decodes EAGLE-2 dynamic trees with it (`eval.tree=dynamic`, lossless)."""


FAMILY = Family(
    kind="eagle3",
    schema=Eagle3Config,
    signals="layer_ids",
    trainable=True,
    category="EAGLE",
    recognizes=lambda config: config.get("speculators_model_type") == "eagle3",
    write=write,
    load=load_speculators,
    lint=check_speculators,
    library="vllm",
    consumers=(
        vllm.consumer("eagle3"),
        llamacpp.consumer("draft-eagle3", feature_drafter=Eagle3Drafter),
        sglang.EAGLE3,
    ),
    about=_about,
    details=details,
    describe=describe,
    check=_check,
    check_target=lambda settings, target_config: eagle3_layer_ids(settings, target_config.num_hidden_layers),
)
