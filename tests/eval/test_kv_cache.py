"""The engine's cache must always equal a fresh forward over the verified tokens."""

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    DynamicCache,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from eval.kv_cache import SlotCache, ancestor_mask, truncate


def _qwen2(tmp_path_factory):
    """A small Qwen2 saved and reloaded in HF format, as a real Qwen target would be."""
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    path = tmp_path_factory.mktemp("qwen2")
    Qwen2ForCausalLM(cfg).save_pretrained(path)
    return AutoModelForCausalLM.from_pretrained(path).eval()


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def model(request, target, tmp_path_factory):
    return target if request.param == "llama" else _qwen2(tmp_path_factory)


def _path(parents, node):
    out = []
    while node >= 0:
        out.append(node)
        node = int(parents[node])
    return out[::-1]


def test_ancestor_mask_of_a_chain_is_causal():
    assert torch.equal(ancestor_mask(torch.arange(-1, 4)[None])[0], torch.tril(torch.ones(5, 5, dtype=torch.bool)))


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_tree_forward_equals_decoding_each_path_alone(model, attn):
    model.set_attn_implementation(attn)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, 300, (1, 9), generator=gen)
    parents = torch.tensor([[-1, 0, 0, 1, -1, 4, 2, 6]])  # two roots, branching at several depths
    nodes = torch.randint(0, 300, (1, 8), generator=gen)
    cache = SlotCache(1, torch.device("cpu"))
    cache.forward(model, prompt)
    tree_logits = cache.forward(model, nodes, parents).logits[0]  # (8, V)
    for j in range(8):
        alone = torch.cat([prompt, nodes[:, _path(parents[0], j)]], dim=1)
        torch.testing.assert_close(tree_logits[j], model(input_ids=alone).logits[0, -1], rtol=1e-4, atol=1e-4)
    model.set_attn_implementation("sdpa")


def _assert_rows_equal_fresh(model, cache: SlotCache, rows: list[torch.Tensor]):
    """Each row's valid slots equal a fresh cache of its verified tokens, and decoding on agrees."""
    for b, ids in enumerate(rows):
        fresh = DynamicCache()
        model(input_ids=ids[None], past_key_values=fresh, use_cache=True)
        valid = cache.valid[b]
        assert int(valid.sum()) == ids.shape[0]
        for ours, ref in zip(cache.cache.layers, fresh.layers):
            torch.testing.assert_close(ours.keys[b][:, valid], ref.keys[0], rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(ours.values[b][:, valid], ref.values[0], rtol=1e-4, atol=1e-5)
    nxt = torch.tensor([[5]] * len(rows))
    ours = cache.forward(model, nxt).logits[:, -1]
    for b, ids in enumerate(rows):
        torch.testing.assert_close(
            ours[b], model(input_ids=torch.cat([ids, nxt[b]])[None]).logits[0, -1], rtol=1e-4, atol=1e-4
        )


def test_tree_compaction_equals_a_fresh_forward_over_the_accepted_path(model):
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, 300, (1, 7), generator=gen)
    parents = torch.tensor([[-1, -1, 0, 1, 1, 4, 2]])
    nodes = torch.randint(0, 300, (1, 7), generator=gen)
    cache = SlotCache(1, torch.device("cpu"))
    cache.forward(model, prompt)
    cache.forward(model, nodes, parents)
    path = _path(parents[0], 5)  # nodes 1 → 4 → 5: not a prefix of the block, so slots move
    cache.keep_last([path], 7)
    assert cache.cache.get_seq_length() == 7 + 3 and bool(cache.valid.all())  # compacted, dense again
    _assert_rows_equal_fresh(model, cache, [torch.cat([prompt[0], nodes[0, path]])])


def test_batch_rows_with_different_accepted_lengths_equal_fresh_caches(model):
    gen = torch.Generator().manual_seed(2)
    prompts = [torch.randint(0, 300, (n,), generator=gen).tolist() for n in (5, 9, 7)]
    cache = SlotCache(3, torch.device("cpu"))
    cache.feed(model, prompts)  # left-padded: holes at the start of short rows
    drafts = torch.randint(0, 300, (3, 4), generator=gen)
    cache.forward(model, drafts)
    accepted = [0, 4, 2]
    cache.rollback([len(p) + a for p, a in zip(prompts, accepted)])
    rows = [torch.tensor(p + drafts[b, :a].tolist()) for b, (p, a) in enumerate(zip(prompts, accepted))]
    _assert_rows_equal_fresh(model, cache, rows)


def test_chain_rollback_is_a_crop(target):
    """One row, chain: rollback crops, the cache stays dense, no mask is ever built."""
    ids = torch.randint(0, 300, (1, 8))
    cache = SlotCache(1, torch.device("cpu"))
    cache.forward(target, ids)
    cache.forward(target, torch.randint(0, 300, (1, 5)))
    cache.rollback([10])
    assert cache.cache.get_seq_length() == 10 and cache.dense and bool(cache.valid.all())


def test_truncate_crops_to_length(target):
    cache = DynamicCache()
    target(input_ids=torch.randint(0, 300, (1, 8)), past_key_values=cache, use_cache=True)
    truncate(cache, 5)
    assert cache.get_seq_length() == 5


def test_sequences_past_a_sliding_window_are_refused(tmp_path_factory):
    cfg = Qwen2Config(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        use_sliding_window=True,
        sliding_window=4,
        max_window_layers=0,
    )
    model = Qwen2ForCausalLM(cfg).eval()
    from eval.errors import EvalError

    with pytest.raises(EvalError, match="sliding-window layers see the last 4 tokens, and eval reached 6"):
        SlotCache(1, torch.device("cpu")).forward(model, torch.randint(0, 300, (1, 6)))


def test_sliding_window_layers_are_exact_within_their_window_and_refused_past_it(standin):
    """Gemma-2 alternates sliding-window and global layers: within the window both see every earlier token, so the
    slot cache's masks are exact there (the logits equal a plain forward); past it, one clear error."""
    from transformers import AutoModelForCausalLM

    from eval.errors import EvalError
    from eval.kv_cache import SlotCache

    model = AutoModelForCausalLM.from_pretrained(standin("gemma").path).eval()
    assert "sliding_attention" in model.config.layer_types
    ids = torch.randint(10, 200, (1, 12), generator=torch.Generator().manual_seed(0))
    cache = SlotCache(1, torch.device("cpu"))
    with torch.no_grad():
        cache.forward(model, ids[:, :8])
        tree = cache.forward(model, ids[:, 8:], input_valid=torch.tensor([[True, True, False, True]]))
        whole = model(ids[:, [*range(10), 11]]).logits
    torch.testing.assert_close(tree.logits[0, [0, 1, 3]], whole[0, 8:])
    model.config.sliding_window = 14
    with pytest.raises(EvalError, match="sliding-window layers see the last 14 tokens, and eval reached 16"):
        cache.forward(model, ids[:, :4])
