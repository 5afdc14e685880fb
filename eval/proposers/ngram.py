"""Prompt lookup (n-gram) proposals, training-free, matching vLLM 0.32's `ngram` speculative method.

Why: prompt lookup is the baseline every trained drafter must beat, and vLLM serves it with no
weights (`speculative_config={"method": "ngram", "prompt_lookup_min": m, "prompt_lookup_max": M,
"num_speculative_tokens": k}`). To compare our measured acceptance with what vLLM reports, the
proposals must be vLLM's own, token for token.

What vLLM does (V1 `NgramProposer`, vllm/v1/spec_decode/ngram_proposer.py:209-295,
`_find_longest_matched_ngram_and_propose_tokens`; the V1 model runner, which the CPU build uses):
- the context is the request's whole verified sequence: prompt + every accepted output token,
  including the token sampled in the step just finished (gpu_model_runner.py:4766-4776);
- it looks for an earlier occurrence of the context's last n tokens, for the longest n in
  [prompt_lookup_min, prompt_lookup_max]; the occurrence must end before the last token (it may
  overlap the suffix itself);
- of several occurrences of that n-gram it takes the EARLIEST (its KMP keeps the rightmost
  match in the reversed sequence, `prev_lps >= longest_ngram`, :263);
- it proposes the up to k tokens that follow the occurrence: fewer when the context ends
  sooner (:294), none when no n ≥ prompt_lookup_min matches (:285) or the context is shorter
  than prompt_lookup_min (:224), and never past max_model_len (k = min(k, max_model_len − len), :228).
A row may therefore draft anywhere from 0 to k tokens; `Proposal.num_draft` says how many. The
proposal is deterministic, so q is one-hot at each draft token (rejection sampling then accepts
token x with probability p(x) and resamples from p with x removed: lossless).

Trees (drafthub only; vLLM serves the chain): with num_matches = k > 1 the proposer collects the
continuations of up to k occurrences of the longest matching n-gram, most recent first, and merges
them into a trie, so one verification forward tries several guesses. q is one-hot at every node;
distinct siblings make tree rejection sampling lossless (a rejected sibling's token leaves p).

GPU note: vLLM's V2 model runner (the GPU default when Triton is present) maps `ngram` to
`NgramGPUSpeculator` instead, which takes the LATEST occurrence and always drafts k tokens,
filling missing ones with the last sampled token. This proposer reproduces V1 only.

Cost: each row keeps its tokens in a growing numpy buffer (only new tokens are appended per
step); the search compares the last token against the context once, then extends the surviving
candidates backwards at most prompt_lookup_max times — a few vectorised passes per row and step.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from eval.config import EvalConfig
from eval.errors import EvalError
from eval.proposer import Proposal, Proposer, TargetFeatures, merge_chains, point_mass_proposal
from eval.proposers.base import ProposerEntry
from eval.sampling import SamplingParams


def _suffix_matches(tokens: np.ndarray, prompt_lookup_max: int) -> tuple[np.ndarray, np.ndarray]:
    """Every earlier position e ≤ T − 2 where the context's last token recurs, ascending, and how many
    tokens of the context's suffix (capped at prompt_lookup_max) match ending there: (ends, lengths)."""
    total = tokens.shape[0]
    ends = np.flatnonzero(tokens[:-1] == tokens[-1])  # ascending
    length = np.zeros(ends.shape[0], dtype=np.int64)  # matched suffix length ending at each e, capped
    alive = np.ones(ends.shape[0], dtype=bool)
    for j in range(prompt_lookup_max):
        pos = ends - j
        ok = pos >= 0
        alive &= ok
        alive[ok] &= tokens[pos[ok]] == tokens[total - 1 - j]
        if not alive.any():
            break
        length += alive
    return ends, length


def _draft_budget(total: int, prompt_lookup_min: int, k: int, max_model_len: Optional[int]) -> int:
    """Draft tokens allowed: k, capped at max_model_len; 0 when the context is too short to match."""
    if max_model_len is not None:
        k = min(k, max_model_len - total)
    return 0 if total < prompt_lookup_min else k


def find_ngram_continuation(
    tokens: np.ndarray, prompt_lookup_min: int, prompt_lookup_max: int, k: int, max_model_len: Optional[int] = None
) -> np.ndarray:
    """vLLM's rule: the ≤ k tokens after the earliest occurrence of the longest matching suffix n-gram.

    Args:
        tokens: (T,) the verified context.
        prompt_lookup_min, prompt_lookup_max: the n-gram lengths tried (inclusive).
        k: most tokens to propose.
        max_model_len: no draft reaches past this length (None = no cap).
    Returns:
        (n,) proposed tokens, 0 ≤ n ≤ k (empty when nothing matches).
    """
    k = _draft_budget(tokens.shape[0], prompt_lookup_min, k, max_model_len)
    if k <= 0:
        return tokens[:0]
    ends, length = _suffix_matches(tokens, prompt_lookup_max)
    if not length.size or length.max() < prompt_lookup_min:
        return tokens[:0]
    start = ends[np.argmax(length == length.max())] + 1  # argmax: the first, i.e. earliest, occurrence
    return tokens[start : start + k]


def find_ngram_continuations(
    tokens: np.ndarray,
    prompt_lookup_min: int,
    prompt_lookup_max: int,
    k: int,
    num_matches: int,
    max_model_len: Optional[int] = None,
) -> list[np.ndarray]:
    """The ≤ k tokens after each of up to `num_matches` occurrences of the longest matching suffix
    n-gram, most recent occurrence first, distinct continuations only (a tree's branches).

    Returns:
        a list of (n_i,) token arrays, 1 ≤ n_i ≤ k; empty when nothing matches.
    """
    k = _draft_budget(tokens.shape[0], prompt_lookup_min, k, max_model_len)
    if k <= 0:
        return []
    ends, length = _suffix_matches(tokens, prompt_lookup_max)
    if not length.size or length.max() < prompt_lookup_min:
        return []
    found, seen = [], set()
    for end in ends[length == length.max()][::-1]:  # most recent first
        continuation = tokens[end + 1 : end + 1 + k]
        key = continuation.tobytes()
        if key not in seen:
            seen.add(key)
            found.append(continuation)
            if len(found) == num_matches:
                break
    return found


class NgramProposer(Proposer):
    """Chains copied from earlier in each row's own sequence (prompt lookup), as vLLM's `ngram`; or,
    with num_matches > 1, a tree of the continuations of several occurrences (our engine only).

    Stateless apart from a per-row numpy copy of the verified tokens, appended to as rows grow.
    """

    target_layer_ids: tuple[int, ...] = ()
    tree_depth = None
    max_num_speculative_tokens = None

    def __init__(
        self,
        *,
        prompt_lookup_min: int,
        prompt_lookup_max: int,
        vocab_size: int,
        max_model_len: Optional[int] = None,  # vLLM's cap: no draft reaches past it; None = no cap
        num_matches: int = 1,  # 1 = vLLM's chain; k > 1 = a tree of up to k matches' continuations
    ):
        if not 1 <= prompt_lookup_min <= prompt_lookup_max:
            raise ValueError(
                f"need 1 ≤ prompt_lookup_min ≤ prompt_lookup_max, got {prompt_lookup_min} and {prompt_lookup_max}"
            )
        self.prompt_lookup_min, self.prompt_lookup_max = prompt_lookup_min, prompt_lookup_max
        if num_matches < 1:
            raise ValueError(f"need num_matches ≥ 1, got {num_matches}")
        self.vocab_size, self.max_model_len, self.num_matches = vocab_size, max_model_len, num_matches
        self.proposes_trees = num_matches > 1  # the static engine path runs chains only
        self.device = torch.device("cpu")
        self._rows: list[np.ndarray] = []  # per row: a buffer whose first _lengths[b] entries are its tokens
        self._lengths: list[int] = []

    def reset(self, batch_size: int = 1, device: Optional[torch.device] = None) -> None:
        self.device = device or torch.device("cpu")
        self._rows = [np.zeros(256, dtype=np.int64) for _ in range(batch_size)]
        self._lengths = [0] * batch_size

    def propose(
        self, sequences: list[list[int]], num_speculative_tokens: int, params: SamplingParams, generator=None
    ) -> Proposal:
        """Up to γ tokens per row (a chain, or with num_matches > 1 a tree of ≤ num_matches branches of
        ≤ γ); rows past the end of their draft are padded with token 0 (in a tree: children of the root)."""
        if len(self._rows) != len(sequences):
            self.reset(len(sequences), self.device)
        lookup = (self.prompt_lookup_min, self.prompt_lookup_max, num_speculative_tokens)
        contexts = [self._sync(b, s) for b, s in enumerate(sequences)]
        if self.num_matches == 1:
            nodes = [(find_ngram_continuation(c, *lookup, self.max_model_len).tolist(), None) for c in contexts]
        else:
            found = [find_ngram_continuations(c, *lookup, self.num_matches, self.max_model_len) for c in contexts]
            nodes = [merge_chains(branches) for branches in found]
        return point_mass_proposal(nodes, params, self.vocab_size, self.device, tree=self.num_matches > 1)

    def accept(self, num_valid: list[int], features: Optional[TargetFeatures] = None) -> None:
        """Nothing to roll back: proposals read only verified tokens, which `propose` is given."""

    def _sync(self, row: int, sequence: list[int]) -> np.ndarray:
        """Row `row`'s tokens as an array, appending only what is new since the last call."""
        have = self._lengths[row]
        if have > len(sequence):  # not the sequence this row grew from: start over
            have = 0
        buf = self._rows[row]
        if len(sequence) > buf.shape[0]:
            buf = self._rows[row] = np.concatenate([buf[:have], np.zeros(2 * len(sequence), dtype=np.int64)])
        buf[have : len(sequence)] = sequence[have:]
        self._lengths[row] = len(sequence)
        return buf[: len(sequence)]


def _check(settings, cfg: EvalConfig) -> None:
    if cfg.tree not in (None, "drafter"):
        raise EvalError(
            f"eval.tree={cfg.tree}: prompt lookup drafts chains (null) or a tree of drafter.num_matches matches "
            "(drafter)"
        )


def _build(drafter, *, target, vocab_size: int, cfg: EvalConfig, path) -> NgramProposer:
    _check(drafter, cfg)
    return NgramProposer(
        prompt_lookup_min=drafter.prompt_lookup_min,
        prompt_lookup_max=drafter.prompt_lookup_max,
        vocab_size=vocab_size,
        num_matches=drafter.num_matches if cfg.tree == "drafter" else 1,
    )


ENTRY = ProposerEntry(build=_build, check=_check)
