"""The toy world's pretrained sibling draft LM (`toyworld:<size>/draft`): built with the world, loaded as a
drafter.init, refused by name where a world has none."""

from dataclasses import replace

import pytest
from transformers import AutoConfig, AutoTokenizer

from distill.errors import DistillError
from distill.targets import resolve_target
from distill.targets.load import target_config
from distill.toyworld.config import MICRO, SIBLINGS, SIZES, SiblingDraft
from heads.config import DraftLMConfig
from heads.draft_lm import DraftLM

TINY = replace(
    MICRO,
    corpus_bytes=120_000,
    train_steps=4,
    num_chat_docs=40,
    num_prompts=8,
    num_train_prompts=8,
)
TINY_SIBLING = SiblingDraft(hidden_size=64, intermediate_size=96, num_attention_heads=2, train_steps=3)


@pytest.fixture
def tiny_world(monkeypatch, tmp_path):
    """`toyworld:micro` as a tiny world with a sibling, built in a fresh cache (the shared micro world untouched)."""
    monkeypatch.setenv("DRAFTHUB_CACHE", str(tmp_path))
    monkeypatch.setitem(SIZES, "micro", TINY)
    monkeypatch.setitem(SIBLINGS, "micro", TINY_SIBLING)
    return tmp_path


def test_sibling_draft_is_built_beside_the_target_and_loads_as_drafter_init(tiny_world):
    draft_dir = resolve_target("toyworld:micro/draft")
    target_dir = resolve_target("toyworld:micro")
    assert draft_dir.startswith(str(tiny_world)) and draft_dir != target_dir
    draft = AutoConfig.from_pretrained(draft_dir)
    assert (draft.num_hidden_layers, draft.hidden_size, draft.intermediate_size) == (1, 64, 96)
    planned = target_config("toyworld:micro/draft")  # without building: the architecture the build saves
    shape = "vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads"
    assert {k: getattr(planned, k) for k in shape.split()} == {k: getattr(draft, k) for k in shape.split()}
    target_tok = AutoTokenizer.from_pretrained(target_dir)
    assert AutoTokenizer.from_pretrained(draft_dir).get_vocab() == target_tok.get_vocab()
    drafter = DraftLM.from_config(DraftLMConfig(init=draft_dir), AutoConfig.from_pretrained(target_dir), target_tok)
    assert drafter.model.config.num_hidden_layers == 1  # the pretrained sibling, not a fresh draft


def test_sibling_draft_alias_mistakes_are_refused_by_name(monkeypatch):
    with pytest.raises(
        DistillError, match=r"the toy world micro builds no draft LM; use one of \['toyworld:chat/draft'"
    ):
        resolve_target("toyworld:micro/draft")
    with pytest.raises(DistillError, match="holds a target and a draft LM; use toyworld:chat/draft"):
        resolve_target("toyworld:chat/drafts")
    with pytest.raises(DistillError, match="unknown toy world 'toyworld:huge/draft'"):
        target_config("toyworld:huge/draft")
