"""Prompt lookup (n-gram) drafting: a training-free family, a settings object instead of weights.

The drafter proposes the tokens that followed the earliest occurrence of the context's last n
tokens (n from prompt_lookup_max down to prompt_lookup_min, the longest match wins), as vLLM's
`ngram` speculative method does. Its export is a config.json of those settings: vLLM needs no
model directory for it, and drafthub's engine reads the same file back (eval/proposers/ngram.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from heads.errors import HeadsError
from heads.settings_drafter import CONFIG, SettingsDrafter


@dataclass(frozen=True)
class NgramDrafter(SettingsDrafter):
    kind = "ngram"
    title = "an n-gram drafter"
    prompt_lookup_min: int
    prompt_lookup_max: int
    num_matches: int = 1  # > 1: our engine may draft a tree of that many matches (eval.tree=drafter)

    def __post_init__(self):
        if not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            raise HeadsError(
                f"prompt lookup needs 1 ≤ prompt_lookup_min ≤ prompt_lookup_max, got {self.prompt_lookup_min} and "
                f"{self.prompt_lookup_max}; set drafter.prompt_lookup_min/max accordingly"
            )
        if self.num_matches < 1:
            raise HeadsError(f"drafter.num_matches={self.num_matches} must be ≥ 1 (1 = one chain, as vLLM serves it)")

    @classmethod
    def from_config(cls, cfg) -> "NgramDrafter":
        return cls(cfg.prompt_lookup_min, cfg.prompt_lookup_max, cfg.num_matches)

    def config_dict(self) -> dict:
        return {
            "drafthub_kind": self.kind,  # what drafthub's loader reads; vLLM takes the method from speculative_config
            "method": "ngram",
            "prompt_lookup_min": self.prompt_lookup_min,
            "prompt_lookup_max": self.prompt_lookup_max,
            "num_matches": self.num_matches,  # drafthub's tree of matches; vLLM drafts one chain
        }

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "NgramDrafter":
        config = cls.read_settings(path)
        file = Path(path) / CONFIG
        try:
            return cls(config["prompt_lookup_min"], config["prompt_lookup_max"], config.get("num_matches", 1))
        except KeyError as e:
            raise HeadsError(
                f"{file} lacks {e}; an n-gram drafter names prompt_lookup_min and prompt_lookup_max"
            ) from None

    def speculative_config(self) -> dict:
        """vLLM's speculative_config keys for this drafter (num_speculative_tokens is the caller's)."""
        return {
            "method": "ngram",
            "prompt_lookup_min": self.prompt_lookup_min,
            "prompt_lookup_max": self.prompt_lookup_max,
        }
