"""Export a draft LM as a plain HF causal-LM directory (what transformers' `assistant_model` and
vLLM's `draft_model` method load), with tokenizer, drafthub.json and a model card."""

from __future__ import annotations

import json
from pathlib import Path

from heads.card import render_model_card
from heads.draft_lm import DraftLM
from heads.formats.staging import staged_directory

PROVENANCE = "drafthub.json"


def export_draft_lm(drafter: DraftLM, tokenizer, out_dir: str | Path, provenance: dict) -> Path:
    with staged_directory(out_dir) as tmp:
        drafter.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / PROVENANCE).write_text(json.dumps(provenance, indent=2))
        (tmp / "README.md").write_text(render_model_card(provenance))
    return Path(out_dir)
