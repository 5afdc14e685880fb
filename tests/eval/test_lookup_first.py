"""Lookup-first drafting: the retrieval store's draft where it matched a long context, EAGLE-3's elsewhere; exact
decoding either way, and the learned drafter idle on the steps the lookup covers."""

import pytest
import torch

from eval.lookup_first import LookupFirstProposer, _per_row
from eval.proposer import Proposal
from eval.proposers.eagle3 import EagleProposer
from eval.proposers.retrieval import RetrievalProposer
from eval.sampling import SamplingParams
from eval.speculative import speculative_generate
from heads.retrieval import RetrievalDrafter
from tests.eval.fitting import assert_first_tokens_follow_the_target

GREEDY = SamplingParams()


@pytest.fixture(scope="module")
def eagle(target):
    from tests.eval.eagle_fit import fit_eagle

    return fit_eagle(target)


def _combined(eagle, answers, vocab: int, min_match: int = 2, learned_max=None) -> LookupFirstProposer:
    lookup = RetrievalProposer(RetrievalDrafter(answers=tuple(map(tuple, answers))), vocab_size=vocab)
    return LookupFirstProposer(EagleProposer(eagle, vocab), lookup, min_match, learned_max)


@pytest.mark.parametrize("gamma", [1, 4])
def test_greedy_output_is_the_targets_and_both_parts_draft(
    target, eagle, tokenizer, prompt_ids, greedy_reference, gamma
):
    """The store holds the first prompts' continuations (the lookup covers their steps), the others are EAGLE-3's;
    decoded one at a time and batched (rows of one step drafted by different parts), every output is the target's."""
    vocab, eos = len(tokenizer), {tokenizer.eos_token_id}
    proposer = _combined(eagle, [ref[:30] for ref in greedy_reference[:2]], vocab)
    for ids, ref in zip(prompt_ids, greedy_reference):
        (out,), _ = speculative_generate(target, proposer, [ids], 40, gamma, GREEDY, eos_ids=eos, vocab_size=vocab)
        assert out == ref
    batched, _ = speculative_generate(target, proposer, prompt_ids, 40, gamma, GREEDY, eos_ids=eos, vocab_size=vocab)
    assert batched == greedy_reference
    assert proposer.drafts_from["lookup"] > 0 and proposer.drafts_from["learned"] > 0


def test_the_learned_drafter_does_not_run_where_the_lookup_covers(target, eagle, tokenizer, prompt_ids):
    ids = prompt_ids[1]
    proposer = _combined(eagle, [[*ids[-3:], 22, 30, 31]], len(tokenizer))
    proposer.reset(1, torch.device("cpu"))
    covered = proposer.propose([ids], 3, GREEDY)
    assert covered.draft_tokens.tolist() == [[22, 30, 31]] and covered.draft_forwards == 0
    strict = _combined(eagle, [[*ids[-3:], 22, 30, 31]], len(tokenizer), min_match=4)  # 3 matched tokens: too few
    strict.reset(1, torch.device("cpu"))
    learned = strict.propose([ids], 3, GREEDY)
    assert learned.draft_forwards == 3 and strict.drafts_from == {"lookup": 0, "learned": 1}
    capped = _combined(eagle, [[1, 2]], len(tokenizer), learned_max=2)  # EAGLE-3 at its card's γ 2, the lookup's 3
    capped.reset(1, torch.device("cpu"))
    assert capped.propose([ids], 3, GREEDY).draft_tokens.shape == (1, 2)


def test_sampled_first_token_follows_the_target(target, eagle, tokenizer, prompt_ids):
    """A covered step under sampling (the learned part's chain is EAGLE-3's own, tested in test_eagle_decoding;
    mixed rows below)."""
    ids = prompt_ids[1]
    proposer = _combined(eagle, [[*ids[-3:], 22, 30, 31]], len(tokenizer))
    assert_first_tokens_follow_the_target(target, proposer, ids, len(tokenizer))
    assert proposer.drafts_from["lookup"] > 0 and proposer.drafts_from["learned"] == 0


def test_mixed_rows_keep_each_parts_q():
    """Row 0 keeps the learned chain and its q; row 1 takes the lookup's longer chain, one-hot, padding valid."""
    q = torch.softmax(torch.randn(2, 2, 10), -1)
    learned = Proposal(torch.tensor([[4, 5], [6, 7]]), q, draft_forwards=2)
    mixed = _per_row(learned, [None, [1, 2, 3]], SamplingParams(temperature=1.0))
    assert mixed.draft_tokens.tolist() == [[4, 5, 0], [1, 2, 3]] and mixed.num_draft.tolist() == [2, 3]
    assert torch.equal(mixed.draft_probs[0, :2], q[0]) and mixed.draft_probs[0, 2].tolist() == [1.0] + [0.0] * 9
    assert torch.equal(mixed.draft_probs[1], torch.eye(10)[[1, 2, 3]]) and mixed.draft_forwards == 2


def test_bad_combinations_are_refused(eagle):
    lookup = RetrievalProposer(RetrievalDrafter(answers=((1, 2),)), vocab_size=100)
    with pytest.raises(ValueError, match=r"learned_max=0: set an integer ≥ 1, or None"):
        LookupFirstProposer(EagleProposer(eagle, 100), lookup, 2, learned_max=0)
    with pytest.raises(ValueError, match=r"min_match=0: set an integer ≥ 1"):
        LookupFirstProposer(EagleProposer(eagle, 100), lookup, 0)
    tree = EagleProposer(eagle, 100, {"depth": 3, "top_k": 2, "total_tokens": 6})
    with pytest.raises(ValueError, match=r"combines chains: build both proposers with eval.tree=null"):
        LookupFirstProposer(tree, lookup, 2)


def test_the_benchmark_decodes_every_contender_between_two_plain_decodes(
    target, eagle, tokenizer, prompt_ids, greedy_reference
):
    """scripts/bench_lookup_first.py's measurement: per prompt plain, each contender, plain; every output checked
    against the greedy reference, τ from the target forwards, and which part drafted each step."""
    from tests.conftest import import_script

    bench = import_script("bench_lookup_first")
    vocab, eos = len(tokenizer), {tokenizer.eos_token_id}
    built = {
        "eagle3": (EagleProposer(eagle, vocab), 2),
        "lookup-first m≥2": (_combined(eagle, [ref[:30] for ref in greedy_reference[:2]], vocab, learned_max=2), 4),
    }
    runs = bench.decode_all(target, built, prompt_ids[:3], greedy_reference[:3], 40, eos, vocab)
    assert len(runs["plain"]["seconds"]) == 6 and runs["plain"]["equal"] == 6
    rows = bench.summary(runs, built)
    assert [r["contender"] for r in rows] == ["eagle3", "lookup-first m≥2"] and all(r["lossless"] for r in rows)
    eagle_row, both = rows
    assert eagle_row["draft_forwards_per_step"] == 2.0 and "drafts_from" not in eagle_row
    assert both["tau"] == round(
        sum(runs["lookup-first m≥2"]["tokens"]) / runs["lookup-first m≥2"]["stats"].target_forwards, 4
    )
    assert sum(both["drafts_from"].values()) == runs["lookup-first m≥2"]["stats"].target_forwards
    runs["eagle3"]["equal"] -= 1  # one output not the target's: that contender is not lossless
    assert not bench.summary(runs, built)[0]["lossless"]
