"""Export Medusa heads in vLLM's Medusa format (`speculative_config={"method": "medusa", ...}`),
with the accuracy-built token tree, drafthub.json and a model card.

vLLM reads config.json and model.safetensors (heads.medusa documents the names and shapes);
`MedusaHeads.from_pretrained` reads the same directory back, so what we evaluate and what
vLLM serves are one set of files.
"""

from __future__ import annotations

import json
from pathlib import Path

from heads.card import render_model_card
from heads.formats.hf_causal import PROVENANCE
from heads.formats.staging import staged_directory
from heads.medusa import MedusaHeads


def export_medusa(heads: MedusaHeads, out_dir: str | Path, provenance: dict) -> Path:
    provenance = {**provenance, "drafter_config": heads.config_dict()}
    with staged_directory(out_dir) as tmp:
        heads.save_pretrained(tmp)
        (tmp / PROVENANCE).write_text(json.dumps(provenance, indent=2))
        (tmp / "README.md").write_text(render_model_card(provenance))
    return Path(out_dir)
