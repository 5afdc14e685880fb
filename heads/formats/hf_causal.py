"""Export a draft LM as a plain HF causal-LM directory (what transformers' `assistant_model` and
vLLM's `draft_model` method load), with the target's tokenizer."""

from __future__ import annotations

from pathlib import Path

from heads.draft_lm import DraftLM
from heads.formats.staging import staged_directory


def export_draft_lm(drafter: DraftLM, tokenizer, out_dir: str | Path) -> Path:
    with staged_directory(out_dir) as tmp:
        drafter.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return Path(out_dir)
