"""Suffix decoding (Oliaro et al., "SuffixDecoding", arXiv:2411.04975): a training-free family, a settings object.

Why: suffix decoding drafts from suffix trees over the request's own prompt and output and over
the outputs of earlier requests, so it pays off where outputs repeat (agents, code edits, RL
rollouts) without any trained weights. vLLM serves it as the `suffix` speculative method through
arctic-inference, so the export is a config.json of vLLM's four `suffix_decoding_*` settings;
drafthub's engine reads the same file back (eval/proposers/suffix.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from heads.errors import HeadsError
from heads.settings_drafter import CONFIG, SettingsDrafter

METHOD = "suffix"  # vLLM's speculative method
SETTINGS = (
    "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob",
)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class SuffixDrafter(SettingsDrafter):
    """vLLM's suffix decoding settings, under vLLM's names and with vLLM's defaults."""

    kind = "suffix"
    title = "a suffix decoding drafter"
    # Deepest node of the prompt and global trees: bounds the matched context plus the draft.
    suffix_decoding_max_tree_depth: int = 24
    # Earlier requests' outputs kept in the global tree (the oldest leaves first); 0 = prompt trees only.
    suffix_decoding_max_cached_requests: int = 10000
    # A match of m context tokens drafts at most floor(factor · m) tokens (and at most γ).
    suffix_decoding_max_spec_factor: float = 1.0
    # Draft tokens need an estimated probability (count ratios along the tree path) of at least this.
    suffix_decoding_min_token_prob: float = 0.1

    def __post_init__(self):
        depth, cached = self.suffix_decoding_max_tree_depth, self.suffix_decoding_max_cached_requests
        factor, prob = self.suffix_decoding_max_spec_factor, self.suffix_decoding_min_token_prob
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
            raise HeadsError(
                f"drafter.suffix_decoding_max_tree_depth={depth!r}: set it to an integer ≥ 1 "
                "(it bounds match + draft length; vLLM's default is 24)"
            )
        if not isinstance(cached, int) or isinstance(cached, bool) or cached < 0:
            raise HeadsError(
                f"drafter.suffix_decoding_max_cached_requests={cached!r}: set it to an integer ≥ 0 "
                "(0 turns the global tree of earlier outputs off)"
            )
        if not _is_number(factor) or factor <= 0:
            raise HeadsError(
                f"drafter.suffix_decoding_max_spec_factor={factor!r}: set it to a number > 0 "
                "(a match of m tokens drafts up to factor · m tokens; 0 would never draft)"
            )
        if not _is_number(prob) or not 0 <= prob <= 1:
            raise HeadsError(
                f"drafter.suffix_decoding_min_token_prob={prob!r}: set it to a probability in [0, 1] "
                "(vLLM's default is 0.1)"
            )

    @classmethod
    def from_config(cls, cfg) -> "SuffixDrafter":
        return cls(**{name: getattr(cfg, name) for name in SETTINGS})

    def settings(self) -> dict:
        """The four settings by vLLM's names."""
        return {name: getattr(self, name) for name in SETTINGS}

    def config_dict(self) -> dict:
        # drafthub_kind is what drafthub's loader reads; vLLM takes the method from speculative_config.
        return {"drafthub_kind": self.kind, "method": METHOD, **self.settings()}

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "SuffixDrafter":
        config = cls.read_settings(path)
        file = Path(path) / CONFIG
        missing = [name for name in SETTINGS if name not in config]
        if missing:
            raise HeadsError(f"{file} lacks {', '.join(missing)}; a suffix decoding drafter names all of {SETTINGS}")
        return cls(**{name: config[name] for name in SETTINGS})

    def speculative_config(self) -> dict:
        """vLLM's speculative_config keys for this drafter (num_speculative_tokens is the caller's)."""
        return {"method": METHOD, **self.settings()}
