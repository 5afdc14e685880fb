"""Export Medusa heads in vLLM's Medusa format (`speculative_config={"method": "medusa", ...}`),
with the accuracy-built token tree.

vLLM reads config.json and model.safetensors (heads.medusa documents the names and shapes);
`MedusaHeads.from_pretrained` reads the same directory back, so what we evaluate and what
vLLM serves are one set of files.
"""

from __future__ import annotations

from pathlib import Path

from heads.formats.staging import staged_directory
from heads.medusa import MedusaHeads


def export_medusa(heads: MedusaHeads, out_dir: str | Path) -> Path:
    with staged_directory(out_dir) as tmp:
        heads.save_pretrained(tmp)
    return Path(out_dir)
