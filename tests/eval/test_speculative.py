import torch
from transformers import DynamicCache

from eval.kv_cache import truncate
from eval.proposer import DraftLMProposer
from eval.sampling import SamplingParams
from eval.speculative import autoregressive_generate, speculative_generate

GREEDY = SamplingParams()


def _eos(tokenizer):
    return {tokenizer.eos_token_id}


def _hf_greedy(target, ids, n, tokenizer):
    out = target.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=n, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return out[0, len(ids) :].tolist()


def test_greedy_speculative_equals_target_generate(target, weak_draft, tokenizer, prompt_ids):
    proposer = DraftLMProposer(weak_draft, len(tokenizer))
    accepted_some = rejected_some = False
    for ids in prompt_ids:
        for gamma in (1, 3, 5):
            spec, stats = speculative_generate(target, proposer, torch.tensor([ids]), 40, gamma, GREEDY, _eos(tokenizer), len(tokenizer))
            assert spec == _hf_greedy(target, ids, 40, tokenizer)
            accepted_some |= any(c > 0 for c in stats.accept_counts)
            rejected_some |= any(c < gamma for c in stats.accept_counts)
    assert accepted_some and rejected_some  # both rollback paths were exercised


def test_our_autoregressive_baseline_equals_target_generate(target, tokenizer, prompt_ids):
    for ids in prompt_ids[:3]:
        assert autoregressive_generate(target, torch.tensor([ids]), 30, GREEDY, _eos(tokenizer), len(tokenizer)) == _hf_greedy(target, ids, 30, tokenizer)


def test_drafter_equal_to_target_accepts_every_token(target, tokenizer, prompt_ids):
    proposer = DraftLMProposer(target, len(tokenizer))
    for params in (GREEDY, SamplingParams(temperature=0.8, top_p=0.9)):
        gen = torch.Generator().manual_seed(0)
        out, stats = speculative_generate(target, proposer, torch.tensor([prompt_ids[0]]), 33, 4, params, set(), len(tokenizer), gen)
        assert len(out) == 33
        assert all(c == 4 for c in stats.accept_counts)  # p == q: nothing is ever rejected


def test_cache_after_rollback_equals_a_fresh_recompute(target, prompt_ids):
    ids = torch.tensor([prompt_ids[0]])
    cache = DynamicCache()
    target(input_ids=ids, past_key_values=cache, use_cache=True)
    rejected = torch.randint(0, target.config.vocab_size, (1, 5))
    target(input_ids=rejected, past_key_values=cache, use_cache=True)  # a verify pass over 5 drafts
    truncate(cache, ids.shape[1] + 2)  # 2 of them accepted
    fresh = DynamicCache()
    target(input_ids=torch.cat([ids, rejected[:, :2]], 1), past_key_values=fresh, use_cache=True)
    assert cache.get_seq_length() == fresh.get_seq_length()
    for a, b in zip(cache.layers, fresh.layers):
        torch.testing.assert_close(a.keys, b.keys)
        torch.testing.assert_close(a.values, b.values)
    # And decoding on from the rolled-back cache gives the fresh cache's logits.
    nxt = torch.tensor([[7]])
    torch.testing.assert_close(target(input_ids=nxt, past_key_values=cache).logits, target(input_ids=nxt, past_key_values=fresh).logits)


def test_sampled_speculative_output_distribution_matches_plain_sampling(target, weak_draft, tokenizer, prompt_ids):
    """First sampled token: speculative decoding and plain sampling draw from the same p."""
    params = SamplingParams(temperature=1.0)
    ids = torch.tensor([prompt_ids[1]])
    from eval.sampling import probs_from_logits

    p = probs_from_logits(target(input_ids=ids).logits[0, -1, : len(tokenizer)], params)
    proposer = DraftLMProposer(weak_draft, len(tokenizer))
    gen = torch.Generator().manual_seed(0)
    draws = 1500
    counts = torch.zeros_like(p)
    for _ in range(draws):
        out, _ = speculative_generate(target, proposer, ids, 1, 2, params, set(), len(tokenizer), gen)
        counts[out[0]] += 1
    top = p.topk(5).indices
    tol = 5 * torch.sqrt(p[top] * (1 - p[top]) / draws)
    assert torch.all((counts[top] / draws - p[top]).abs() <= tol)
