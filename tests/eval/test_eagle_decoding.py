"""EAGLE-3 decoding through the engine: lossless chains and EAGLE-2 dynamic trees."""

import pytest
import torch

from eval.proposers.eagle3 import EagleProposer
from eval.sampling import SamplingParams
from eval.speculative import speculative_generate
from tests.eval.fitting import assert_first_tokens_follow_the_target

GREEDY = SamplingParams()


@pytest.fixture(scope="module")
def drafter(target):
    from tests.eval.eagle_fit import fit_eagle

    return fit_eagle(target)


@pytest.mark.parametrize(
    "tree",
    [None, {"depth": 4, "top_k": 3, "total_tokens": 8}, {"depth": 3, "top_k": 2, "total_tokens": 20}],
    ids=["chain", "dynamic_tree", "whole_tree"],
)
def test_greedy_eagle_equals_target_greedy(target, drafter, tokenizer, prompt_ids, greedy_reference, tree):
    proposer = EagleProposer(drafter, len(tokenizer), tree)
    accepted = []
    for gamma in (1, 4) if tree is None else (0,):
        out, stats = speculative_generate(
            target, proposer, prompt_ids, 40, gamma, GREEDY, eos_ids={tokenizer.eos_token_id}, vocab_size=len(tokenizer)
        )
        assert out == greedy_reference
        accepted += stats.accept_counts
    depth = 4 if tree is None else tree["depth"]
    assert any(c > 0 for c in accepted) and any(c < depth for c in accepted)  # both paths ran
    batched, _ = speculative_generate(
        target, proposer, prompt_ids[:3], 40, 3, GREEDY, eos_ids={tokenizer.eos_token_id}, vocab_size=len(tokenizer)
    )
    assert batched == greedy_reference[:3]


@pytest.mark.parametrize("tree", [None, {"depth": 3, "top_k": 3, "total_tokens": 8}], ids=["chain", "dynamic_tree"])
def test_sampled_eagle_draws_from_the_target_distribution(target, drafter, tokenizer, prompt_ids, tree):
    assert_first_tokens_follow_the_target(
        target, EagleProposer(drafter, len(tokenizer), tree), prompt_ids[1], len(tokenizer)
    )


@pytest.fixture(scope="module")
def eagle1(target):
    from tests.eval.eagle_fit import fit_eagle1

    return fit_eagle1(target)


@pytest.mark.parametrize("tree", [None, {"depth": 4, "top_k": 3, "total_tokens": 8}], ids=["chain", "dynamic_tree"])
def test_greedy_eagle1_equals_target_greedy(target, eagle1, tokenizer, prompt_ids, greedy_reference, tree):
    proposer = EagleProposer(eagle1, len(tokenizer), tree)
    out, stats = speculative_generate(
        target, proposer, prompt_ids, 40, 3, GREEDY, eos_ids={tokenizer.eos_token_id}, vocab_size=len(tokenizer)
    )
    assert out == greedy_reference
    depth = 3 if tree is None else tree["depth"]
    assert any(c > 0 for c in stats.accept_counts) and any(c < depth for c in stats.accept_counts)


def test_eagle1_export_is_what_vllm_eagle_loads_and_round_trips(tmp_path, target, eagle1, tokenizer, prompt_ids):
    import json

    from safetensors import safe_open

    from heads.eagle1 import Eagle1Drafter
    from tests.exporting import export

    out = export(eagle1, tmp_path / "d")
    config = json.loads((out / "config.json").read_text())
    assert (
        config["num_hidden_layers"] == 1 and config["architectures"] == ["LlamaForCausalLM"] and config["bias"] is False
    )
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        H = target.config.hidden_size
        assert tuple(f.get_slice("fc.weight").get_shape()) == (H, 2 * H)
    # vLLM's eagle layout
    assert "fc.bias" not in names and not any("lm_head" in n or "input_layernorm" in n for n in names)
    assert {
        "layers.0.self_attn.q_proj.weight",
        "layers.0.post_attention_layernorm.weight",
        "embed_tokens.weight",
    } <= names
    loaded = Eagle1Drafter.from_pretrained(out, target.get_output_embeddings().weight).eval()
    for name, value in eagle1.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[name]), name
    # Same proposals: the same tokens accepted at every step (outputs alone would match anyway).
    _, before = speculative_generate(
        target,
        EagleProposer(eagle1, len(tokenizer)),
        prompt_ids[:2],
        20,
        3,
        GREEDY,
        eos_ids=set(),
        vocab_size=len(tokenizer),
    )
    _, after = speculative_generate(
        target,
        EagleProposer(loaded, len(tokenizer)),
        prompt_ids[:2],
        20,
        3,
        GREEDY,
        eos_ids=set(),
        vocab_size=len(tokenizer),
    )
    assert after.accept_counts == before.accept_counts and any(before.accept_counts)
