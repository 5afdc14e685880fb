"""Retrieval from the target's own answers: drafts from the request or the store, exact decoding, the store bound
to its hash, the answers the pipeline stores, and τ that grows with the store."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from eval.proposers.retrieval import RetrievalProposer
from eval.sampling import SamplingParams
from eval.speculative import speculative_generate
from heads.config import RetrievalConfig
from heads.errors import HeadsError
from heads.retrieval import STORE, RetrievalDrafter
from tests.eval.fitting import assert_first_tokens_follow_the_target
from train.stages.eval import answer_spans

GREEDY = SamplingParams()


def _proposer(answers, vocab=100, **settings) -> RetrievalProposer:
    drafter = RetrievalDrafter(**settings, answers=tuple(map(tuple, answers)))
    proposer = RetrievalProposer(drafter, vocab_size=vocab)
    proposer.reset(1, torch.device("cpu"))
    return proposer


def test_the_request_drafts_first_and_the_store_where_the_request_has_nothing():
    store = [[7, 8, 9, 10, 11], [3, 7, 8, 20, 21], [3, 7, 8, 20, 22]]
    proposer = _proposer(store)
    # "7 8" occurs in all three answers; "3 7 8" in two, both followed by 20, then 21 or 22 (one each: 0.5 ≥ 0.1)
    assert proposer.propose([[50, 3, 7, 8]], 4, GREEDY).draft_tokens.tolist() == [[20, 21]]
    assert proposer.drafts_from == {"request": 0, "store": 1, "none": 0}
    # The request itself holds "3 7 8 40 41" earlier: its own continuation, not the store's
    proposer.reset(1)
    assert proposer.propose([[3, 7, 8, 40, 41, 3, 7, 8]], 2, GREEDY).draft_tokens.tolist() == [[40, 41]]
    assert proposer.drafts_from["request"] == 1
    # one shared token ("9") drafts "10 11" by default; with min_store_match=2 it is too little context
    proposer.reset(1)
    assert proposer.propose([[60, 61, 9]], 4, GREEDY).draft_tokens.tolist() == [[10, 11]]
    cautious = _proposer(store, min_store_match=2)
    assert cautious.propose([[60, 61, 9]], 4, GREEDY).num_draft.tolist() == [0]


def test_a_request_match_shorter_than_min_request_match_drafts_nothing():
    """Why: every draft widens the verification forward; a one-token match of the request is often wrong, and on a
    CPU where a block of 5 costs 1.4 plain steps it loses more than it drafts (prompt lookup drafts from 2)."""
    request = [[5, 40, 41, 6, 5]]  # "5" was followed by "40 41" earlier in the request: a one-token match
    assert _proposer([[1]], min_request_match=1).propose(request, 2, GREEDY).draft_tokens.tolist() == [[40, 41]]
    cautious = _proposer([[1]], min_request_match=2)
    assert cautious.propose(request, 2, GREEDY).num_draft.tolist() == [0]
    cautious.reset(1)
    assert cautious.propose([[6, 5, 40, 41, 6, 5]], 2, GREEDY).draft_tokens.tolist() == [[40, 41]]  # "6 5": 2


def test_the_store_never_grows_with_requests():
    """Requests neither enter the store nor each other: a drafter measures the same in any prompt order."""
    proposer = _proposer([[1, 2, 3, 4]])
    proposer.propose([[9, 5, 6, 7, 8]], 4, GREEDY)
    proposer.reset(1)
    assert proposer.propose([[30, 5, 6]], 4, GREEDY).num_draft.tolist() == [0]  # 5 6 7 8 was another request's


@pytest.mark.parametrize("gamma", [1, 4])
def test_greedy_speculative_equals_target_greedy(target, tokenizer, prompt_ids, greedy_reference, gamma):
    """The store holds the target's own continuations of the first prompts (so drafts are accepted) and noise (so
    drafts are rejected): every output is the target's greedy output."""
    noise = torch.Generator().manual_seed(0)
    noisy = [torch.randint(5, len(tokenizer), (30,), generator=noise).tolist() for _ in range(4)]
    answers = [ref[:30] for ref in greedy_reference[:3]] + noisy
    drafter = RetrievalDrafter(answers=tuple(map(tuple, answers)))
    proposer = RetrievalProposer(drafter, vocab_size=len(tokenizer))
    eos, vocab = {tokenizer.eos_token_id}, len(tokenizer)
    counts = []
    for ids, ref in zip(prompt_ids, greedy_reference):
        (out,), stats = speculative_generate(target, proposer, [ids], 40, gamma, GREEDY, eos_ids=eos, vocab_size=vocab)
        assert out == ref
        counts += zip(stats.draft_counts, stats.accept_counts)
    assert proposer.drafts_from["store"] > 0
    assert any(a > 0 for _, a in counts) and any(a < n for n, a in counts)


def test_sampled_first_token_follows_the_target(target, tokenizer, prompt_ids):
    ids = prompt_ids[1]
    proposer = _proposer([[*ids[-3:], 22, 30, 31]], vocab=len(tokenizer))  # the store drafts 22 after the prompt
    assert proposer.propose([ids], 2, GREEDY).draft_tokens.tolist()[0][:1] == [22]
    assert_first_tokens_follow_the_target(target, proposer, ids, len(tokenizer))


def test_a_larger_store_of_the_targets_answers_drafts_more(target, tokenizer, prompt_ids, greedy_reference):
    """τ on prompts whose answers repeat stored text: none stored < part stored < all stored."""
    eos, vocab = {tokenizer.eos_token_id}, len(tokenizer)

    def tau(answers) -> float:
        proposer = RetrievalProposer(RetrievalDrafter(answers=tuple(map(tuple, answers))), vocab_size=vocab)
        tokens = steps = 0
        for ids in prompt_ids:
            (out,), stats = speculative_generate(target, proposer, [ids], 40, 4, GREEDY, eos_ids=eos, vocab_size=vocab)
            tokens, steps = tokens + len(out), steps + len(stats.accept_counts)
        return tokens / steps

    halves = [ref[: len(ref) // 2] for ref in greedy_reference]
    assert tau([[0]]) < tau(halves) < tau(greedy_reference)


def test_export_binds_the_store_to_its_hash(tmp_path):
    drafter = RetrievalDrafter.from_config(RetrievalConfig(max_answers=2), [[1, 2, 3], [], [4, 5], [6]])
    assert drafter.answers == ((1, 2, 3), (4, 5))  # the first two non-empty answers
    drafter.save_pretrained(tmp_path / "d")
    config = json.loads((tmp_path / "d" / "config.json").read_text())
    assert config["store"] | {"sha256": None} == {"file": STORE, "sha256": None, "tokens": 5, "answers": 2}
    assert RetrievalDrafter.from_pretrained(tmp_path / "d") == drafter
    store = load_file(str(tmp_path / "d" / STORE))
    save_file(store, str(tmp_path / "d" / "kept.safetensors"))
    store["tokens"][0] = 9  # a store edited after export
    save_file(store, str(tmp_path / "d" / STORE))
    with pytest.raises(HeadsError, match=r"store.safetensors is not the store this drafter was exported with"):
        RetrievalDrafter.from_pretrained(tmp_path / "d")
    save_file(load_file(str(tmp_path / "d" / "kept.safetensors")), str(tmp_path / "d" / STORE))
    earlier = {k: v for k, v in config.items() if k != "min_request_match"}  # exported before the setting existed
    (tmp_path / "d" / "config.json").write_text(json.dumps(earlier))
    assert RetrievalDrafter.from_pretrained(tmp_path / "d").min_request_match == 1  # what it was measured with
    (tmp_path / "d" / STORE).unlink()
    with pytest.raises(HeadsError, match=r"has no store.safetensors: a retrieval drafter drafts from it"):
        RetrievalDrafter.from_pretrained(tmp_path / "d")


def test_a_store_without_answers_is_refused_at_export(tmp_path):
    with pytest.raises(HeadsError, match=r"needs answers to draft from, and the distilled dataset holds none"):
        RetrievalDrafter.from_config(RetrievalConfig(), []).save_pretrained(tmp_path / "d")
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("min_store_match", 24, r"min_store_match=24: set an integer from 1 to max_tree_depth − 1"),
        ("min_request_match", 0, r"min_request_match=0: set an integer from 1 to max_tree_depth − 1 \(23\)"),
        ("max_tree_depth", 1, r"max_tree_depth=1: set an integer ≥ 2"),
        ("min_token_prob", 1.5, r"min_token_prob=1.5: set a probability"),
        ("max_answers", 0, r"max_answers=0: set an integer ≥ 1, or null"),
    ],
)
def test_bad_settings_are_one_clear_line(setting, value, message):
    with pytest.raises(HeadsError, match=message):
        RetrievalDrafter.from_config(RetrievalConfig(**{setting: value}))


def test_the_pipeline_stores_each_trained_on_answer_span():
    """A two-turn sample gives two answers; prompt tokens (mask 0) are never stored."""
    dataset = {
        "input_ids": [[1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11]],
        "loss_mask": [[0, 1, 1, 0, 0, 1, 1, 1], [0, 0, 1]],
    }
    assert answer_spans(dataset) == [[2, 3], [6, 7, 8], [11]]


def test_the_store_is_written_as_llama_cpps_static_ngram_cache(tmp_path):
    """common/ngram-cache.cpp's layout: per bigram key (a, b, −1, −1) the count of followers, then (token, count)."""
    import struct

    from heads.retrieval import write_lookup_cache

    write_lookup_cache([[1, 2, 3, 1, 2, 4], [1, 2, 3]], tmp_path / "cache.bin")
    words = struct.unpack(f"<{(tmp_path / 'cache.bin').stat().st_size // 4}i", (tmp_path / "cache.bin").read_bytes())
    assert list(words) == [
        *(1, 2, -1, -1, 2, 3, 2, 4, 1),  # "1 2" was followed by 3 twice and by 4 once
        *(2, 3, -1, -1, 1, 1, 1),
        *(3, 1, -1, -1, 1, 2, 1),
    ]
