"""One drafter export per kind, shared by the publish stage and the served check.

The served check (eval.serve=vllm) serves a fresh export of the final checkpoint; publishing
exports the same checkpoint again and compares the served-files hash, so the directory that
goes out is byte for byte the one vLLM ran.
"""

from __future__ import annotations

import json
from pathlib import Path

from distill.config import TargetConfig
from distill.target import load_target
from heads.draft_lm import DraftLM
from heads.eagle import Eagle3Drafter
from heads.eagle1 import Eagle1Drafter
from heads.formats.eagle_export import export_eagle1, export_eagle3
from heads.formats.hf_causal import export_draft_lm
from heads.formats.medusa_vllm import export_medusa
from heads.medusa import MedusaHeads

SUMMARY = "train_summary.json"


def exported_gamma(report: dict, default: int) -> int:
    """The num_speculative_tokens written into an EAGLE-3 export: the eval's recommendation."""
    return report.get("recommended_num_speculative_tokens") or default


def export_drafter(kind: str, final: Path, out_dir: Path, provenance: dict, target: TargetConfig, tokenizer, gamma: int) -> dict:
    """Write the serving-format export of checkpoint `final` (atomically) into `out_dir`; return its drafthub.json."""
    summary = json.loads((final / SUMMARY).read_text())
    if kind == "medusa":
        provenance = {**provenance, "medusa": summary["medusa"]}
        export_medusa(MedusaHeads.from_pretrained(final), out_dir, provenance)
    elif kind == "eagle1":
        lm_head = load_target(target, "cpu").get_output_embeddings().weight
        export_eagle1(Eagle1Drafter.from_pretrained(final, lm_head), out_dir, provenance)
    elif kind == "eagle3":
        verifier = json.loads((final / "config.json").read_text())["speculators_config"]["verifier"]
        provenance = {**provenance, "draft_vocab": summary["draft_vocab"]}
        export_eagle3(Eagle3Drafter.from_pretrained(final), out_dir, provenance, verifier, gamma)
    else:
        export_draft_lm(DraftLM.from_pretrained(final), tokenizer, out_dir, provenance)
    return json.loads((Path(out_dir) / "drafthub.json").read_text())
