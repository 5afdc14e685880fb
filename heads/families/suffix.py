"""Suffix decoding: drafts from a suffix tree of this prompt and earlier outputs (arctic-inference in vLLM).
Training-free: its export is settings only."""

from __future__ import annotations

from importlib.util import find_spec
from typing import Optional

from heads.config import SuffixConfig
from heads.families.base import ExportJob, Family, settings_described
from heads.formats import vllm
from heads.suffix import SETTINGS, SuffixDrafter


def _write(job: ExportJob, out) -> None:
    SuffixDrafter.from_config(job.settings).save_pretrained(out)


def _arctic_missing() -> Optional[str]:
    """vLLM's `suffix` method drafts with arctic-inference (its config check raises without it)."""
    if find_spec("arctic_inference") is None:
        return "vLLM's suffix method needs arctic-inference (pip install arctic-inference==0.1.1; a source build)"
    return None


def _about(provenance: dict) -> str:
    return """Suffix decoding needs no weights: these are settings (`config.json`). vLLM drafts with
arctic-inference (`pip install arctic-inference==0.1.1`, built from source)."""


FAMILY = Family(
    kind="suffix",
    schema=SuffixConfig,
    signals="tokens",
    trainable=False,
    category="training-free",
    recognizes=lambda config: config.get("drafthub_kind") == "suffix",
    write=_write,
    load=lambda path, target: SuffixDrafter.from_pretrained(path),
    lint=SuffixDrafter.from_pretrained,
    library="vllm",
    consumers=(
        vllm.consumer(
            "suffix",
            model=False,
            extra=lambda settings: {k: settings.get(k) for k in SETTINGS},
            missing=_arctic_missing,
            in_order=True,  # its global tree grows from earlier requests' outputs
        ),
    ),
    about=_about,
    describe=settings_described,
    check=SuffixDrafter.from_config,
)
