"""PARD (An et al., ICLR 2026): a draft LM that proposes a whole block in one forward.

The drafter is an ordinary causal LM sharing the target's tokenizer. At serving time vLLM feeds
it the accepted tokens, the target's bonus token and then K − 1 copies of a mask token
(`pard_token`, an id inside the vocabulary whose embedding row was trained for this role), all at
their true positions under causal attention; the logits at the bonus token and at each mask
give the K draft tokens. Its export is therefore the plain HF causal-LM directory with
`pard_token` in config.json (vLLM `draft_model` + `parallel_drafting: true`), and the native
checkpoint already is that directory.
"""

from __future__ import annotations

from pathlib import Path

from heads.draft_lm import DraftLM
from heads.errors import HeadsError

MASK_KEY = "pard_token"  # vLLM's config key for the mask id
DRAFTS_KEY = "max_draft_tokens"  # ours: drafts per forward the drafter was trained for (vLLM ignores it)


class PardDrafter(DraftLM):
    kind = "pard"

    @classmethod
    def from_config(cls, cfg, target_config, tokenizer, trust_remote_code: bool = False, *, pard_token: int):
        """A fresh (or `cfg.init`) draft LM with the mask id and the trained block length in its config."""
        drafter = super().from_config(cfg, target_config, tokenizer, trust_remote_code)
        check_mask_token(pard_token, drafter.config.vocab_size, "drafter.pard_token")
        drafter.config.update({MASK_KEY: pard_token, DRAFTS_KEY: cfg.max_draft_tokens})
        return drafter

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs) -> "PardDrafter":
        drafter = super().from_pretrained(path, **kwargs)
        config = drafter.config
        if getattr(config, MASK_KEY, None) is None:
            raise HeadsError(f"{path}/config.json has no {MASK_KEY}: not a PARD drafter")
        check_mask_token(config.pard_token, config.vocab_size, f"{path}: {MASK_KEY}")
        return drafter

    @property
    def config(self):
        return self.model.config

    @property
    def pard_token(self) -> int:
        return int(self.config.pard_token)

    @property
    def max_draft_tokens(self) -> int | None:
        return getattr(self.config, DRAFTS_KEY, None)


def check_mask_token(token: int, vocab_size: int, name: str) -> None:
    """The mask id indexes the drafter's embedding table directly (vLLM checks no range)."""
    if not 0 <= token < vocab_size:
        raise HeadsError(
            f"{name}={token} is outside the vocabulary (0..{vocab_size - 1}); pick an id the data never "
            "contains, e.g. a reserved special token, or leave it unset to have one picked"
        )
