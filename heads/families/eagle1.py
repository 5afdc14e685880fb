"""EAGLE-1: one decoder layer over the target's last hidden state and the next token's embedding."""

from __future__ import annotations

from heads.config import Eagle1Config
from heads.eagle1 import Eagle1Drafter
from heads.families.base import Family, copy_checkpoint
from heads.families.eagle3 import check_features
from heads.formats import vllm


def _about(provenance: dict) -> str:
    return "The target's lm_head and embeddings are shared, so none ships here."


FAMILY = Family(
    kind="eagle1",
    schema=Eagle1Config,
    signals="final_normed",
    trainable=True,
    category="EAGLE",
    recognizes=lambda config: config.get("drafthub_kind") == "eagle1",
    write=copy_checkpoint,  # the native checkpoint already is the layout vLLM's `eagle` method loads
    load=lambda path, target: Eagle1Drafter.from_pretrained(path, target.get_output_embeddings().weight),
    lint=Eagle1Drafter.check_export,
    library="vllm",
    consumers=(vllm.consumer("eagle"),),
    about=_about,
    check=check_features,
)
