"""Layer skipping drafts as a draft LM: its export is a plain causal LM (the target without some layers)."""

from eval.proposers import draft_lm

ENTRY = draft_lm.ENTRY
