"""scripts/bench_retrieval.py's replay: the steps a drafter takes against known greedy decodes, and the speed-up
those steps take when each verification width is priced as the engine's probe measured it."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.conftest import import_script


@pytest.fixture(scope="module")
def bench():
    return import_script("bench_retrieval")


def test_replay_keeps_the_drafts_prefix_the_decode_continues_with(bench):
    from eval.proposers.retrieval import RetrievalProposer
    from heads.retrieval import RetrievalDrafter

    drafter = RetrievalDrafter(answers=((7, 8, 9, 10, 11),))
    proposer = RetrievalProposer(drafter, vocab_size=100)
    # after "7" the store drafts "8 9 10 11": the decode takes "8 9", then differs; the target's 50 is the bonus
    tokens, widths = bench.replay(proposer, [[1, 7]], [[8, 9, 50, 51]], gamma=4)
    assert tokens == 4 and widths[5] == 1  # one step verifying 4 drafted tokens gave 3
    assert sum(widths.values()) == 2 and bench.replayed_tau(proposer, [[1, 7]], [[8, 9, 50, 51]], 4) == 2.0


def test_the_priced_speed_up_charges_each_step_its_padded_widths_time(bench):
    width_ms = {1: 10.0, 2: 17.0, 3: 20.0, 4: 14.0, 5: 15.0}
    widths = Counter({1: 2, 3: 2})  # two plain steps, two steps verifying 3 tokens (run as 4: padded)
    assert bench.priced_speedup(8, widths, width_ms, {}) == pytest.approx(8 * 10 / (2 * 10 + 2 * 20))
    assert bench.priced_speedup(8, widths, width_ms, {3: 4}) == pytest.approx(8 * 10 / (2 * 10 + 2 * 14))
