"""A small causal LM drafting one token per forward: the classic draft model, served as it is."""

from __future__ import annotations

from heads.config import DraftLMConfig
from heads.draft_lm import DraftLM
from heads.families.base import Family, copy_with_tokenizer, is_causal_lm
from heads.formats import llamacpp, transformers, vllm
from heads.layer_skip import LAYER_SKIP_KEY
from heads.pard import MASK_KEY


def recognizes(config: dict) -> bool:
    # with a mask id it drafts in parallel (PARD); with a layer-skip record it is the target's own layers
    return is_causal_lm(config) and MASK_KEY not in config and LAYER_SKIP_KEY not in config


FAMILY = Family(
    kind="draft_lm",
    schema=DraftLMConfig,
    signals="tokens",
    trainable=True,
    category="draft LM",
    recognizes=recognizes,
    write=copy_with_tokenizer,
    load=lambda path, target: DraftLM.from_pretrained(path),
    lint=DraftLM.from_pretrained,
    library="transformers",
    consumers=(vllm.consumer("draft_model"), llamacpp.consumer("draft-simple"), transformers.ASSISTANT),
)
