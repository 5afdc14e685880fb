"""Lookahead decoding (Fu et al. 2024): a training-free family, a settings object instead of weights.

Why: lookahead decoding needs no drafter at all. The target itself runs a few Jacobi iterations
on guessed future tokens (a 2D window riding in each verification forward), collects the n-grams
those iterations produce in a pool, and verifies pooled n-grams that start with the last verified
token in the same forward. It is the training-free baseline that, unlike prompt lookup, also
drafts text never seen in the prompt. vLLM does not serve it (no speculative method), so the
export is a config.json of these settings that only drafthub's engine reads back
(eval/proposers/lookahead.py). Names follow the paper and llama.cpp's examples/lookahead: W, N, G.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from heads.errors import HeadsError
from heads.settings_drafter import CONFIG, SettingsDrafter


@dataclass(frozen=True)
class LookaheadDrafter(SettingsDrafter):
    """Window, n-gram and verification sizes (defaults: heads/config.py LookaheadConfig). Each step feeds the
    target up to G·(N−1) pool nodes plus (W−1) + W·(N−2) window nodes after the last verified token."""

    kind = "lookahead"
    title = "a lookahead drafter"
    window_size: int  # W: columns of the Jacobi window (future positions guessed in parallel)
    ngram_size: int  # N: tokens per pooled n-gram; the window keeps N−1 levels (past iterations)
    max_verify_ngrams: int  # G: pooled n-grams kept per first token, all verified each step; 0 = none
    pool_from_prompt: bool  # also pool the n-grams of the prompt and of the verified output (LADE)

    def __post_init__(self):
        for name, value, least, fix in (
            ("ngram_size", self.ngram_size, 2, "an n-gram is a key token plus ≥ 1 continuation"),
            ("window_size", self.window_size, 1, "the window needs ≥ 1 column"),
            ("max_verify_ngrams", self.max_verify_ngrams, 0, "0 verifies no pooled n-grams"),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise HeadsError(f"drafter.{name}={value!r}: set it to an integer ≥ {least} ({fix})")
        if not isinstance(self.pool_from_prompt, bool):
            raise HeadsError(f"drafter.pool_from_prompt={self.pool_from_prompt!r}: set it to true or false")

    @classmethod
    def from_config(cls, cfg) -> "LookaheadDrafter":
        return cls(
            window_size=cfg.window_size,
            ngram_size=cfg.ngram_size,
            max_verify_ngrams=cfg.max_verify_ngrams,
            pool_from_prompt=cfg.pool_from_prompt,
        )

    def config_dict(self) -> dict:
        return {"drafthub_kind": self.kind, **asdict(self)}  # no vLLM keys: vLLM does not serve lookahead

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "LookaheadDrafter":
        config = cls.read_settings(path)
        file = Path(path) / CONFIG
        try:
            return cls(
                window_size=config["window_size"],
                ngram_size=config["ngram_size"],
                max_verify_ngrams=config["max_verify_ngrams"],
                pool_from_prompt=config["pool_from_prompt"],
            )
        except KeyError as e:
            raise HeadsError(
                f"{file} lacks {e}; a lookahead drafter names window_size, ngram_size, max_verify_ngrams "
                "and pool_from_prompt"
            ) from None
