"""Raw-text training data (`data.source=corpus`): windows of plain text, every token trained on.

The baseline distillation is measured against: the same drafter and steps trained on text the
target did not write. For the toy world the text is its own training corpus (the stdlib train
sources); for any other prompt set, each conversation's messages joined as plain text.
"""

from __future__ import annotations

import random

from distill.errors import DistillError


def corpus_examples(texts: list[str], tokenizer, window: int, count: int, seed: int) -> list[dict]:
    """`count` windows of `window` tokens (0 = every non-overlapping one) from the texts, joined by end tokens.

    Windows start at offsets drawn from Random(seed), so the first n windows are the same for any
    count ≥ n: the data-scaling benchmark's subsets are nested.
    """
    stream: list[int] = []
    for text in texts:
        stream += tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"] + [tokenizer.eos_token_id]
    if len(stream) <= window:
        raise DistillError(
            f"the corpus has {len(stream)} tokens, not more than data.corpus_window={window}; lower it or add text"
        )
    if count:
        rng = random.Random(seed)
        starts = [rng.randrange(len(stream) - window) for _ in range(count)]
    else:
        starts = list(range(0, len(stream) - window + 1, window))
    return [
        {"prompt_index": i, "prompt_ids": [], "input_ids": stream[s : s + window], "loss_mask": [1] * window}
        for i, s in enumerate(starts)
    ]


def conversation_text(messages: list[dict]) -> str:
    """A conversation as plain text: its messages' contents, one after another (a `turns` row: its user turns)."""
    return "\n".join(m["content"] for m in messages if m["content"] is not None)
