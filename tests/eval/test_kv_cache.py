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


def _all_sliding_qwen2(window: int):
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        use_sliding_window=True,
        sliding_window=window,
        max_window_layers=0,
    )
    return Qwen2ForCausalLM(cfg).eval()


def test_a_model_whose_every_layer_slides_is_exact_past_its_window():
    """Qwen2 with use_sliding_window (every layer sees its last 4 tokens): chains, ragged rows and trees past the
    window equal a plain forward, which masks by position as the model was trained."""
    model = _all_sliding_qwen2(window=4)
    ids = torch.randint(0, 300, (1, 14), generator=torch.Generator().manual_seed(1))
    cache = SlotCache(1, torch.device("cpu"))
    with torch.no_grad():
        cache.forward(model, ids[:, :9])  # the model's own path, past the window
        block = cache.forward(model, ids[:, 9:13], input_valid=torch.tensor([[True, True, False, True]]))
        whole = model(ids[:, [*range(11), 12]]).logits
    torch.testing.assert_close(block.logits[0, [0, 1, 3]], whole[0, 9:], rtol=1e-4, atol=1e-4)
    rows = [ids[0, :10], ids[0, 2:9]]
    batch = SlotCache(2, torch.device("cpu"))
    with torch.no_grad():
        batch.feed(model, [r.tolist() for r in rows])
        _assert_rows_equal_fresh(model, batch, rows)


def test_sliding_window_layers_beside_global_ones_are_exact_past_the_window(standin):
    """Gemma-2 alternates sliding-window and global layers: past the window each kind gets its own mask, and a tree
    block with a padded node equals a plain forward."""
    from transformers import AutoConfig

    path = standin("gemma").path
    config = AutoConfig.from_pretrained(path)
    config.sliding_window = 6
    model = AutoModelForCausalLM.from_pretrained(path, config=config).eval()
    assert {"sliding_attention", "full_attention"} <= set(model.config.layer_types)
    ids = torch.randint(10, 200, (1, 16), generator=torch.Generator().manual_seed(0))
    cache = SlotCache(1, torch.device("cpu"))
    with torch.no_grad():
        cache.forward(model, ids[:, :10])
        tree = cache.forward(model, ids[:, 10:14], input_valid=torch.tensor([[True, True, False, True]]))
        whole = model(ids[:, [*range(12), 13]]).logits
    torch.testing.assert_close(tree.logits[0, [0, 1, 3]], whole[0, 10:], rtol=1e-4, atol=1e-4)
