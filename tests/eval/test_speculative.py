import pytest
import torch

from eval.proposer import TargetFeatures
from eval.proposers.draft_lm import DraftLMProposer
from eval.sampling import SamplingParams
from eval.speculative import Acceptance, autoregressive_generate, speculative_generate
from tests.eval.fitting import assert_first_tokens_follow_the_target

GREEDY = SamplingParams()


def _eos(tokenizer):
    return {tokenizer.eos_token_id}


def _hf_greedy(target, ids, n, tokenizer):
    out = target.generate(
        torch.tensor([ids]),
        do_sample=False,
        max_new_tokens=n,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return out[0, len(ids) :].tolist()


@pytest.fixture(scope="module")
def reference(target, tokenizer, prompt_ids):
    """The target's own greedy continuations (transformers' generate), 40 tokens each."""
    return [_hf_greedy(target, ids, 40, tokenizer) for ids in prompt_ids]


@pytest.mark.parametrize("tree", [None, [3, 2, 1], [2, 2, 2, 1]], ids=["chain", "tree321", "tree2221"])
def test_greedy_speculative_equals_target_generate(target, weak_draft, tokenizer, prompt_ids, reference, tree):
    proposer = DraftLMProposer(weak_draft, len(tokenizer), tree=tree)
    accepted_some = rejected_some = False
    for ids, ref in zip(prompt_ids, reference):
        for gamma in (1, 3, 5) if tree is None else (0,):
            (spec,), stats = speculative_generate(
                target, proposer, [ids], 40, gamma, GREEDY, eos_ids=_eos(tokenizer), vocab_size=len(tokenizer)
            )
            assert spec == ref
            depth = gamma if tree is None else len(tree)
            accepted_some |= any(c > 0 for c in stats.accept_counts)
            rejected_some |= any(c < depth for c in stats.accept_counts)
    assert accepted_some and rejected_some  # both rollback paths were exercised


@pytest.mark.parametrize("tree", [None, [2, 2]], ids=["chain", "tree"])
def test_batched_decoding_equals_one_row_at_a_time(target, weak_draft, tokenizer, prompt_ids, reference, tree):
    prompts = [ids[-n:] for ids, n in zip(prompt_ids, (60, 23, 41, 8, 60, 35))]  # ragged: left padding
    proposer = DraftLMProposer(weak_draft, len(tokenizer), tree=tree)
    batched, stats = speculative_generate(
        target, proposer, prompts, 40, 3, GREEDY, eos_ids=_eos(tokenizer), vocab_size=len(tokenizer)
    )
    one_by_one = [
        speculative_generate(target, proposer, [p], 40, 3, GREEDY, eos_ids=_eos(tokenizer), vocab_size=len(tokenizer))[
            0
        ][0]
        for p in prompts
    ]
    assert batched == one_by_one
    assert len(set(stats.accept_counts)) > 1  # rows really accepted different lengths
    assert (
        autoregressive_generate(target, prompts, 40, GREEDY, eos_ids=_eos(tokenizer), vocab_size=len(tokenizer))
        == one_by_one
    )


def test_our_autoregressive_baseline_equals_target_generate(target, tokenizer, prompt_ids, reference):
    for ids, ref in zip(prompt_ids[:3], reference):
        assert autoregressive_generate(
            target, [ids], 40, GREEDY, eos_ids=_eos(tokenizer), vocab_size=len(tokenizer)
        ) == [ref]


@pytest.mark.parametrize("tree", [None, [2, 1, 1]], ids=["chain", "tree"])
def test_drafter_equal_to_target_accepts_every_token(target, tokenizer, prompt_ids, tree):
    proposer = DraftLMProposer(target, len(tokenizer), tree=tree)
    for params in (GREEDY, SamplingParams(temperature=0.8, top_p=0.9, top_k=50)):
        gen = torch.Generator().manual_seed(0)
        (out,), stats = speculative_generate(
            target, proposer, [prompt_ids[0]], 33, 3, params, eos_ids=set(), vocab_size=len(tokenizer), generator=gen
        )
        assert len(out) == 33
        assert all(c == 3 for c in stats.accept_counts)  # p == q: nothing is ever rejected


@pytest.mark.parametrize("tree", [None, [3, 1]], ids=["chain", "tree"])
def test_sampled_speculative_output_distribution_matches_plain_sampling(
    target, weak_draft, tokenizer, prompt_ids, tree
):
    """The first sampled token follows the target's warped p, whatever the draft proposed."""
    assert_first_tokens_follow_the_target(
        target, DraftLMProposer(weak_draft, len(tokenizer), tree=tree), prompt_ids[1], len(tokenizer)
    )


def test_typical_acceptance_decodes_and_is_a_separate_rule(target, weak_draft, tokenizer, prompt_ids):
    params = SamplingParams(temperature=0.7)
    proposer = DraftLMProposer(weak_draft, len(tokenizer), tree=[2, 2])
    (out,), stats = speculative_generate(
        target,
        proposer,
        [prompt_ids[0]],
        30,
        2,
        params,
        eos_ids=set(),
        vocab_size=len(tokenizer),
        generator=torch.Generator().manual_seed(0),
        acceptance=Acceptance(rule="typical"),
    )
    assert len(out) == 30 and stats.target_forwards < 30


class _RecordingProposer(DraftLMProposer):
    """A draft LM that also asks for target features and records what the engine hands over."""

    target_layer_ids = (0, 2)

    def reset(self, batch_size=1, device=None):
        super().reset(batch_size, device)
        self.seen = [[] for _ in range(batch_size)]

    def accept(self, num_valid, features: TargetFeatures = None):
        super().accept(num_valid)
        for b in range(len(self.seen)):
            self.seen[b].append(features.states[b, features.valid[b]])


@pytest.mark.parametrize("tree", [None, [2, 2]], ids=["chain", "tree"])
def test_target_features_of_verified_tokens_reach_the_proposer(target, weak_draft, tokenizer, prompt_ids, tree):
    prompts = [prompt_ids[0][-30:], prompt_ids[2][-17:]]
    proposer = _RecordingProposer(weak_draft, len(tokenizer), tree=tree)
    out, _ = speculative_generate(target, proposer, prompts, 12, 3, GREEDY, eos_ids=set(), vocab_size=len(tokenizer))
    for b, prompt in enumerate(prompts):
        got = torch.cat(proposer.seen[b])  # features of every verified token, in order
        assert got.shape[0] >= len(prompt) + len(out[b]) - 1  # all but the newest token
        n = len(prompt) + len(out[b])  # the row may have decoded past its output; compare what we know
        final = []  # id 2 = N: the last layer's output before the final norm (as vLLM reads it)
        hook = target.model.norm.register_forward_pre_hook(lambda module, args, final=final: final.append(args[0]))
        try:
            hidden = target(input_ids=torch.tensor([prompt + out[b]]), output_hidden_states=True).hidden_states
        finally:
            hook.remove()
        torch.testing.assert_close(
            got[:n], torch.cat([hidden[0][0], final[0][0]], -1)[: got.shape[0]], rtol=1e-4, atol=1e-4
        )
