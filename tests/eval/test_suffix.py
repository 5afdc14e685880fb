"""Suffix decoding: hand-computed drafts, the global tree and its workloads, settings, losslessness, arctic parity."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from eval.config import EvalConfig
from eval.proposers.suffix import SuffixProposer
from eval.run import evaluate
from eval.sampling import SamplingParams
from eval.speculative import speculative_generate
from eval.suffix_tree import SuffixTree
from heads.errors import HeadsError
from heads.suffix import SuffixDrafter
from tests.eval.fitting import assert_first_tokens_follow_the_target

GREEDY = SamplingParams()


def _draft(corpus, pattern, depth=24, k=5, factor=1.0, min_prob=0.1, tree=False):
    suffixes = SuffixTree(depth)
    for seq_id, tokens in enumerate(corpus):
        suffixes.extend(seq_id, tokens)
    draft = suffixes.speculate(pattern, k, factor, min_prob, tree)
    return draft.tokens, draft.parents, float(draft.score)


# Corpus A = 1 2 3 1 2 4 1 2 3. "1 2" occurs 3 times, followed by 3 twice and by 4 once; "1 2 3" is followed
# once by 1 (its second occurrence ends the sequence). So after "… 1 2": 3 with p = 2/3, then 1 with 2/3 · 1/2.
A = [1, 2, 3, 1, 2, 4, 1, 2, 3]
# Corpus B: "1 2" is followed by 8 twice, but "6 1 2" (a longer match) only by 9.
B = [1, 2, 8, 1, 2, 8, 6, 1, 2, 9]
C = [1, 2, 3, 4, 5, 6, 7, 8]  # every continuation certain: only the budget stops a draft


@pytest.mark.parametrize(
    "corpus, pattern, settings, expected",
    [
        # Counts give probabilities: m = 2 drafts 3 (2/3) and 1 (1/3), score 1, beating m = 1's 3 (budget 1).
        ([A], [7, 1, 2], {}, ([3, 1], 1.0)),
        # min_token_prob prunes: 1/3 < 0.5.
        ([A], [7, 1, 2], {"min_prob": 0.5}, ([3], 2 / 3)),
        # max depth respected: a depth-3 tree holds no 4-token string, so nothing follows "1 2 3".
        ([A], [7, 1, 2], {"depth": 3}, ([3], 2 / 3)),
        # The longest match wins: "6 1 2" → 9 (p = 1) over "1 2" → 8 (p = 2/3).
        ([B], [0, 6, 1, 2], {"k": 1}, ([9], 1.0)),
        ([B], [0, 5, 1, 2], {"k": 1}, ([8], 2 / 3)),  # "5 1 2" never occurred: "1 2" decides
        # The budget is ⌊max_spec_factor · m⌋ for a match of m tokens (here m = 2), capped by γ = k.
        ([C], [0, 1, 2], {}, ([3, 4], 2.0)),
        ([C], [0, 1, 2], {"factor": 1.5}, ([3, 4, 5], 3.0)),
        ([C], [0, 1, 2], {"factor": 0.5}, ([3], 1.0)),
        ([C], [0, 1, 2], {"factor": 3.0, "k": 2}, ([3, 4], 2.0)),
        # Depth 4 bounds match + draft: "1 2" drafts 2, "2" alone drafts 3 and wins.
        ([C], [0, 1, 2], {"factor": 5.0, "depth": 4}, ([3, 4, 5], 3.0)),
        # Every sequence in the tree counts: two more "1 2 4" make 4 (3/5) likelier than 3 (2/5).
        ([A, [1, 2, 4], [1, 2, 4]], [7, 1, 2], {"k": 1}, ([4], 0.6)),
        # Equal counts go in arctic's sibling order: a child reaching a count moves ahead of the siblings
        # already there if it led its old group (4 did, alone at count 1), else behind them.
        ([A, [1, 2, 4]], [7, 1, 2], {"k": 1}, ([4], 0.5)),
        # Scores are float32 sums, as arctic's: "1" (m = 1) drafts 1 1 0 at 3/5 + 1/5 + 1/5 = 1.0000001, which
        # beats "1 1" (m = 2) at 1/3 · 3 = 1.0; in float64 the first sum is 0.9999999999999999 and would lose.
        ([[1, 1, 1, 0, 1, 1]], [0, 1, 1], {"k": 3, "factor": 3.0}, ([1, 1, 0], 1.0000001)),
        # No match: no draft (a one-token pattern has no match length m < 1).
        ([A], [0, 9], {}, ([], 0.0)),
        ([A], [2], {}, ([], 0.0)),
    ],
)
def test_chain_drafts_on_a_hand_made_corpus(corpus, pattern, settings, expected):
    tokens, parents, score = _draft(corpus, pattern, **settings)
    assert (tokens, score) == (expected[0], pytest.approx(expected[1], rel=1e-6))
    assert parents is None


def test_tree_drafts_best_first_and_prunes():
    # 1 2 3 1 2 4 1 2 3 1 2 5: after "1 2" come 3 (2/4), 4 (1/4), 5 (1/4); "1 2 3" always goes on "1 2",
    # then 4 or 5 (1/4 each). Budget 2·2 = 4 nodes: 3, 1, 2 (p = 1/2 each), then the first 1/4 found: the
    # root's 4 (ties go in the order the candidates were found; arctic leaves that order unspecified).
    corpus = [[1, 2, 3, 1, 2, 4, 1, 2, 3, 1, 2, 5]]
    assert _draft(corpus, [0, 1, 2], depth=6, factor=2.0, tree=True) == ([3, 1, 2, 4], [-1, 0, 1, -1], 1.75)
    # min_token_prob 0.3 drops every 1/4 candidate: the draft stops at 3 nodes, under its budget.
    assert _draft(corpus, [0, 1, 2], depth=6, factor=2.0, min_prob=0.3, tree=True) == ([3, 1, 2], [-1, 0, 1], 1.5)


def _proposer(**settings):
    proposer = SuffixProposer(vocab_size=50, **settings)
    proposer.reset(1, torch.device("cpu"))
    return proposer


def _propose(proposer, rows, gamma=5, params=GREEDY):
    proposal = proposer.propose(rows, gamma, params)
    return [proposal.draft_tokens[b, :n].tolist() for b, n in enumerate(proposal.num_draft.tolist())]


def test_a_request_drafts_from_its_own_prompt_and_output():
    proposer = SuffixProposer(vocab_size=50)
    proposer.reset(2, torch.device("cpu"))
    # Row 0: "5 6" occurred before, followed by 7 8 (p = 1/2 each: the pattern's own occurrence ends the
    # sequence); a 2-token match drafts 2. Row 1 repeats nothing: no draft, padded with token 0.
    rows = [[5, 6, 7, 8, 9, 5, 6], [1, 2, 3]]
    sampled = proposer.propose(rows, 5, SamplingParams(temperature=1.0))
    assert sampled.draft_tokens.tolist() == [[7, 8], [0, 0]] and sampled.num_draft.tolist() == [2, 0]
    assert sampled.parents is None and sampled.draft_forwards == 0
    assert torch.equal(sampled.draft_probs.argmax(-1), sampled.draft_tokens)  # one-hot q
    assert sampled.draft_probs.shape == (2, 2, 50) and torch.all(sampled.draft_probs.sum(-1) == 1)
    # The rows grow (only the new tokens are added to the trees): now "5 6 7 8 9" matches (m = 5).
    rows[0] += [7, 8, 9]
    rows[1] += [4]
    assert _propose(proposer, rows) == [[5, 6, 7, 8, 9], []]


def test_a_second_request_drafts_the_first_ones_output_within_its_workload():
    proposer = _proposer()
    proposer.begin_workload("a")
    prompt, output = [1, 2, 3], [10, 11, 12, 13, 14]
    _propose(proposer, [prompt])
    _propose(proposer, [prompt + output])  # verified output enters the global tree
    second = [4, 5, 10, 11]  # ends with the first output's start; its own prompt has nothing to offer
    proposer.reset(1)
    assert _propose(proposer, [second], gamma=3) == [[12, 13]]  # "10 11" matched: budget 2
    proposer.begin_workload("b")  # a new workload starts with an empty global tree
    assert _propose(proposer, [second]) == [[]]
    proposer.begin_workload("a")  # what eval/measure.py calls; workload a kept its memory
    assert _propose(proposer, [second]) == [[12, 13]]


def test_rows_of_a_batch_draft_each_others_verified_output():
    proposer = SuffixProposer(vocab_size=50)
    proposer.reset(2, torch.device("cpu"))
    _propose(proposer, [[1, 2], [3, 10, 11]])
    # Row 0 verified 10 11 12 13 this step; row 1 (proposed after it) already drafts from it, as in arctic.
    assert _propose(proposer, [[1, 2, 10, 11, 12, 13], [3, 10, 11]]) == [[], [12, 13]]


@pytest.mark.parametrize(
    "cached, query, expected",
    [
        (0, [7, 20, 21], []),  # no global tree
        (1, [7, 20, 21], []),  # the query's own slot (arctic allocates it at the start) evicted both outputs
        (2, [7, 20, 21], [22, 23]),  # the last output stays ...
        (2, [7, 10, 11], []),  # ... the oldest left first
        (3, [7, 10, 11], [12, 13]),
    ],
)
def test_the_global_tree_keeps_the_last_max_cached_requests(cached, query, expected):
    proposer = _proposer(suffix_decoding_max_cached_requests=cached)
    for output in ([10, 11, 12, 13], [20, 21, 22, 23]):
        proposer.reset(1)
        _propose(proposer, [[1]])
        _propose(proposer, [[1] + output])
    proposer.reset(1)
    assert _propose(proposer, [query]) == [expected]


def test_evaluate_gives_the_warmup_and_each_gamma_pass_its_own_workload(target, tokenizer, prompt_ids):
    names = []

    class Recording(SuffixProposer):
        def begin_workload(self, name):
            names.append(name)
            super().begin_workload(name)

    proposer = Recording(vocab_size=len(tokenizer))
    names.clear()  # the constructor's own "default"
    cfg = EvalConfig(num_prompts=2, max_new_tokens=4, num_speculative_tokens=2, gamma_sweep=[1], warmup_prompts=1)
    evaluate(target, proposer, prompt_ids[:2], cfg, {tokenizer.eos_token_id}, len(tokenizer), {}, progress=False)
    assert names == ["warmup", "gamma=1", "gamma=2", "gamma=1", "gamma=2"]
    assert sorted(proposer._workloads) == ["default", "gamma=1", "gamma=2", "warmup"]


@pytest.mark.parametrize(
    "setting, value",
    [
        ("suffix_decoding_max_tree_depth", 0),
        ("suffix_decoding_max_tree_depth", 2.5),
        ("suffix_decoding_max_cached_requests", -1),
        ("suffix_decoding_max_spec_factor", 0),
        ("suffix_decoding_max_spec_factor", -1.0),
        ("suffix_decoding_min_token_prob", 1.5),
        ("suffix_decoding_min_token_prob", -0.1),
    ],
)
def test_bad_settings_are_one_clear_line(setting, value):
    for build in (SuffixDrafter, lambda **kw: SuffixProposer(vocab_size=50, **kw)):
        with pytest.raises(HeadsError, match=rf"^drafter\.{setting}={value!r}: set it to") as error:
            build(**{setting: value})
        assert "\n" not in str(error.value)


def test_export_is_vllms_settings_and_reads_back(tmp_path):
    drafter = SuffixDrafter(suffix_decoding_max_tree_depth=16, suffix_decoding_min_token_prob=0.2)
    drafter.save_pretrained(tmp_path / "suffix")
    settings = {
        "suffix_decoding_max_tree_depth": 16,
        "suffix_decoding_max_cached_requests": 10000,
        "suffix_decoding_max_spec_factor": 1.0,
        "suffix_decoding_min_token_prob": 0.2,
    }
    assert json.loads((tmp_path / "suffix" / "config.json").read_text()) == {
        "drafthub_kind": "suffix",
        "method": "suffix",
        **settings,
    }
    assert SuffixDrafter.from_pretrained(tmp_path / "suffix") == drafter
    assert drafter.speculative_config() == {"method": "suffix", **settings}
    assert SuffixDrafter.from_config(SimpleNamespace(**settings)) == drafter
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text(json.dumps({"drafthub_kind": "ngram"}))
    with pytest.raises(HeadsError, match="not a suffix decoding drafter"):
        SuffixDrafter.from_pretrained(tmp_path / "other")
    (tmp_path / "other" / "config.json").write_text(json.dumps({"drafthub_kind": "suffix", "method": "suffix"}))
    with pytest.raises(HeadsError, match="lacks suffix_decoding_max_tree_depth"):
        SuffixDrafter.from_pretrained(tmp_path / "other")


@pytest.mark.needs_vllm  # arctic-inference comes with the vllm extras
def test_drafts_equal_arctic_inference():
    """Our proposer against arctic-inference's own cache, the way vLLM drives it, over random workloads."""
    arctic = pytest.importorskip("arctic_inference.suffix_decoding")
    rng = np.random.default_rng(0)
    compared = drafted = 0
    for trial in range(12):
        depth, vocab, cached = int(rng.integers(3, 12)), int(rng.integers(2, 6)), int(rng.integers(0, 4))
        use_tree = trial % 3 == 2
        settings = {"suffix_decoding_max_spec_factor": float(rng.choice([0.5, 1.0, 2.0]))}
        settings["suffix_decoding_min_token_prob"] = float(rng.choice([0.0, 0.1, 0.3]))
        ours = SuffixProposer(
            vocab_size=vocab,
            suffix_decoding_max_tree_depth=depth,
            suffix_decoding_max_cached_requests=cached,
            use_tree_spec=use_tree,
            **settings,
        )
        theirs = arctic.SuffixDecodingCache(depth, cached)
        request = 0
        for _ in range(4):  # batches
            rows = [rng.integers(0, vocab, int(rng.integers(1, 12))).tolist() for _ in range(int(rng.integers(1, 4)))]
            ours.reset(len(rows))
            ids = list(range(request, request + len(rows)))
            request += len(rows)
            new = [[] for _ in rows]
            for step in range(10):
                gamma = int(rng.integers(1, 6))
                proposal = ours.propose(rows, gamma, GREEDY)
                for b, (r, row) in enumerate(zip(ids, rows)):
                    # vLLM, row after row: a request starts (taking its global slot) at its first draft, later
                    # the last step's verified tokens enter the trees; then it drafts.
                    theirs.start_request(r, row) if step == 0 else theirs.add_active_response(r, new[b])
                    draft = theirs.speculate(
                        r, row[-depth:], gamma, settings["suffix_decoding_max_spec_factor"], 0.0,
                        settings["suffix_decoding_min_token_prob"], use_tree,
                    )  # fmt: skip
                    mine = proposal.draft_tokens[b, : proposal.num_draft[b]].tolist()
                    if use_tree:  # equal-probability nodes may be taken in another order: same size
                        assert len(mine) == len(draft.token_ids)
                    else:
                        assert mine == list(draft.token_ids), (row, gamma)
                    compared, drafted = compared + 1, drafted + bool(mine)
                    new[b] = mine[: int(rng.integers(0, len(mine) + 1))] + rng.integers(0, vocab, 1).tolist()
                    row += new[b]
            for r in ids:
                theirs.stop_request(r)
    assert 0.3 * compared < drafted < compared


@pytest.mark.parametrize("use_tree_spec", [False, True], ids=["chain", "tree"])
def test_greedy_speculative_equals_target_greedy(target, tokenizer, prompt_ids, greedy_reference, use_tree_spec):
    proposer = SuffixProposer(vocab_size=len(tokenizer), use_tree_spec=use_tree_spec)
    eos, vocab = {tokenizer.eos_token_id}, len(tokenizer)
    counts = []
    for gamma in (1, 4):
        proposer.begin_workload(f"gamma={gamma}")  # later prompts draft earlier outputs, as in eval
        for ids, ref in zip(prompt_ids, greedy_reference):
            (out,), stats = speculative_generate(
                target, proposer, [ids], 40, gamma, GREEDY, eos_ids=eos, vocab_size=vocab
            )
            assert out == ref
            counts += zip(stats.draft_counts, stats.accept_counts)
    assert any(n == 0 for n, _ in counts) and any(a > 0 for _, a in counts) and any(a < n for n, a in counts)
    # A batch: ragged drafts, rows drafting from each other's output, each row still the target's own.
    proposer.begin_workload("batch")
    batched, stats = speculative_generate(target, proposer, prompt_ids, 40, 4, GREEDY, eos_ids=eos, vocab_size=vocab)
    assert batched == greedy_reference
    assert len(set(stats.draft_counts)) > 1


def test_sampled_first_token_follows_the_target_with_a_branching_tree(target, tokenizer, prompt_ids):
    # Token 20 occurred twice in this prompt, followed by 22 and by 30: with budget ⌊2 · 1⌋ = 2 the tree
    # drafts both as siblings (target p ≈ 0.03 and 0.33), so recursive rejection over siblings is exercised.
    ids = prompt_ids[1] + [20]
    proposer = SuffixProposer(vocab_size=len(tokenizer), use_tree_spec=True, suffix_decoding_max_spec_factor=2.0)
    proposer.reset(1, torch.device("cpu"))
    proposal = proposer.propose([ids], 2, GREEDY)
    assert proposal.draft_tokens.tolist() == [[22, 30]] and proposal.parents.tolist() == [[-1, -1]]
    assert_first_tokens_follow_the_target(target, proposer, ids, len(tokenizer))
