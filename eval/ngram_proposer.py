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

from eval.proposer import Proposal, TargetFeatures
from eval.sampling import SamplingParams


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
    total = tokens.shape[0]
    if max_model_len is not None:
        k = min(k, max_model_len - total)
    if total < prompt_lookup_min or k <= 0:
        return tokens[:0]
    # Candidate occurrences by their last position e ≤ T − 2 (at least one token must follow).
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
    if not length.size or length.max() < prompt_lookup_min:
        return tokens[:0]
    start = ends[np.argmax(length == length.max())] + 1  # argmax: the first, i.e. earliest, occurrence
    return tokens[start : start + k]


class NgramProposer:
    """Chains copied from earlier in each row's own sequence (prompt lookup), as vLLM's `ngram`.

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
    ):
        if not 1 <= prompt_lookup_min <= prompt_lookup_max:
            raise ValueError(
                f"need 1 ≤ prompt_lookup_min ≤ prompt_lookup_max, got {prompt_lookup_min} and {prompt_lookup_max}"
            )
        self.prompt_lookup_min, self.prompt_lookup_max = prompt_lookup_min, prompt_lookup_max
        self.vocab_size, self.max_model_len = vocab_size, max_model_len
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
        """Up to γ tokens per row; rows past the end of their draft are padded with token 0."""
        if len(self._rows) != len(sequences):
            self.reset(len(sequences), self.device)
        lookup = (self.prompt_lookup_min, self.prompt_lookup_max, num_speculative_tokens, self.max_model_len)
        drafts = [find_ngram_continuation(self._sync(b, s), *lookup) for b, s in enumerate(sequences)]
        counts = [len(d) for d in drafts]
        tokens = np.zeros((len(drafts), max(counts, default=0)), dtype=np.int64)  # (B, N), padding 0
        for b, d in enumerate(drafts):
            tokens[b, : len(d)] = d
        draft_tokens = torch.from_numpy(tokens).to(self.device)
        probs = None
        if not params.greedy:  # a deterministic proposal: q is one-hot at each draft token
            probs = torch.zeros(*draft_tokens.shape, self.vocab_size, device=self.device)  # (B, N, V)
            probs.scatter_(-1, draft_tokens[..., None], 1.0)
        return Proposal(draft_tokens, probs, num_draft=torch.tensor(counts, device=self.device))

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
