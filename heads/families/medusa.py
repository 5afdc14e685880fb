"""Medusa: extra heads on the target's last hidden state, head k guessing the token k+2 ahead."""

from __future__ import annotations

from pathlib import Path

from heads.config import MedusaConfig
from heads.families.base import Family, copy_checkpoint, read_config
from heads.formats import vllm
from heads.medusa import MedusaHeads, check_medusa_settings


def _describe(export_dir: Path, summary: dict) -> dict:
    return {"medusa": summary.get("medusa"), "drafter_config": read_config(export_dir)}


def _about(provenance: dict) -> str:
    return """vLLM's Medusa method drafts a chain of the heads' top-1 tokens: γ at most the head count. drafthub's
engine also decodes the token tree in `medusa_tree.json` (`eval.tree=drafter`, lossless). transformers'
`generate` has no Medusa support."""


def _details(provenance: dict) -> str:
    """Per-head accuracy on held-out samples and the tree built from it."""
    cal = provenance.get("medusa")
    if not cal or "head_accuracy" not in cal:
        return ""
    rows = "\n".join(
        f"| {k} | +{k + 2} | {acc[0]:.3f} | {sum(acc[:5]):.3f} |" for k, acc in enumerate(cal["head_accuracy"])
    )
    return f"""

## Medusa heads (held-out accuracy, {cal["holdout_samples"]} samples)

| head | predicts token | top-1 | top-5 |
|---|---|---|---|
{rows}

Token tree (`medusa_tree.json`): {cal["tree_nodes"]} nodes, depth {cal["tree_depth"]}, expected τ \
{cal["expected_tau"]:.2f} if the heads erred independently."""


FAMILY = Family(
    kind="medusa",
    schema=MedusaConfig,
    signals="final_normed",
    trainable=True,
    category="Medusa",
    recognizes=lambda config: config.get("model_type") == "medusa",
    write=copy_checkpoint,
    load=lambda path, target: MedusaHeads.from_pretrained(path),
    lint=MedusaHeads.from_pretrained,
    library="vllm",
    consumers=(vllm.consumer("medusa"),),
    about=_about,
    details=_details,
    describe=_describe,
    check=check_medusa_settings,
    serving_gamma=lambda gamma, provenance: min(
        gamma, (provenance.get("drafter_config") or {}).get("num_heads", gamma)
    ),
)
