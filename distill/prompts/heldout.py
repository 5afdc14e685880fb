"""The held-out slice: prompts split off the prompt source *before* distillation, so that eval never
measures a drafter on a prompt it was trained on.

When a run names no eval source (no `eval_prompts`, no `eval_split`) and its prompts are not the toy
world's (which has a held-out split of its own), `data.holdout` prompts of `data.prompts` are chosen
by a seeded draw over the whole source, left out of the distilled dataset, and read back by eval.
The manifest records the draw; `prompt_digest` lets the gate prove eval and training prompts disjoint.
"""

from __future__ import annotations

import hashlib
import random
from typing import Iterable

TOYWORLD = "toyworld"


def holdout_active(prompts: str, holdout: int) -> bool:
    """Whether data.prompts gives up a held-out slice (the toy world holds its own held-out split)."""
    return holdout > 0 and prompts != TOYWORLD


def heldout_indices(num_conversations: int, holdout: int, seed: int) -> list[int]:
    """Indices (into the source, in file order) of the held-out conversations: a seeded draw, sorted.

    The draw depends only on the source's length and the seed, so distill and eval pick the same ones."""
    count = min(holdout, num_conversations // 2)  # never more than half the source
    return sorted(random.Random(f"drafthub-holdout-{seed}").sample(range(num_conversations), count))


def prompt_digest(ids: Iterable[int]) -> str:
    """A short digest of one prompt's token ids (as the target's chat template encodes it)."""
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]


def digest_of_set(digests: Iterable[str]) -> str:
    """One digest of a set of prompt digests: order-free, so two runs over the same prompts agree."""
    return hashlib.sha256("\n".join(sorted(set(digests))).encode()).hexdigest()[:16]
