"""Whether a drafter speaks the target's vocabulary: a draft LM with another tokenizer proposes ids that
mean other text, is accepted almost never, and still evaluates as "lossless" (the target decides every
token). eval records the answer in the report, and the publish gate refuses a drafter whose tokenizer
differs from its target's."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def tokenizer_matches(drafter_dir: str | Path, target_tokenizer) -> Optional[bool]:
    """True/False: the tokenizer shipped in drafter_dir has the target's vocabulary (token → id, special tokens
    included) or not; None: the drafter ships no tokenizer (heads over the target's own vocabulary)."""
    drafter_dir = Path(drafter_dir)
    if not any((drafter_dir / name).exists() for name in _TOKENIZER_FILES):
        return None
    from transformers import AutoTokenizer

    try:
        theirs = AutoTokenizer.from_pretrained(drafter_dir, trust_remote_code=False)
    except (OSError, ValueError):
        return False  # a tokenizer that does not even load is not the target's
    return theirs.get_vocab() == target_tokenizer.get_vocab()
