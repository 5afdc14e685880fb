"""Export a draft LM as a plain HF causal-LM directory (what transformers' `assistant_model` and
vLLM's `draft_model` method load), with tokenizer, drafthub.json and a model card.

The directory is assembled in a temporary sibling and renamed into place, so a failed export
leaves nothing behind and an existing export is only replaced whole.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from heads.card import render_model_card
from heads.draft_lm import DraftLM

PROVENANCE = "drafthub.json"


def export_draft_lm(drafter: DraftLM, tokenizer, out_dir: str | Path, provenance: dict) -> Path:
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        drafter.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / PROVENANCE).write_text(json.dumps(provenance, indent=2))
        (tmp / "README.md").write_text(render_model_card(provenance))
        if out.exists():
            old = out.with_name(f".{out.name}-old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
