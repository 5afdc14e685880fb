"""Layer skipping: the drafter is the target's own forward without some layers, exported as a plain causal LM."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from eval.proposers.draft_lm import DraftLMProposer
from eval.sampling import SamplingParams
from eval.speculative import autoregressive_generate, speculative_generate
from heads.errors import HeadsError
from heads.families import read_export
from heads.layer_skip import LAYER_SKIP_KEY, LayerSkipDrafter, check_skip_layers, skipping
from tests.exporting import export


def _identity_hooks(target, skip):
    """A reference independent of `skipping`: the skipped layers return their input unchanged."""

    def passthrough(module, args, kwargs, output):
        hidden = args[0] if args else kwargs["hidden_states"]
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

    return [target.model.layers[i].register_forward_hook(passthrough, with_kwargs=True) for i in skip]


def test_drafter_logits_equal_the_target_with_the_same_layers_skipped(target, prompt_ids):
    ids = torch.tensor([prompt_ids[0]])
    drafter = LayerSkipDrafter.from_target(target, [1])
    assert drafter.model.config.num_hidden_layers == target.config.num_hidden_layers - 1
    with torch.no_grad():
        ours = drafter(ids).logits
        hooks = _identity_hooks(target, [1])
        try:
            reference = target(input_ids=ids, use_cache=False).logits
        finally:
            for h in hooks:
                h.remove()
        with skipping(target, [1]):
            skipped = target(input_ids=ids, use_cache=False).logits
        full = target(input_ids=ids).logits
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(skipped, reference, rtol=1e-5, atol=1e-5)
    assert (ours - full).abs().max() > 1e-2  # skipping a layer really changes the model
    assert len(target.model.layers) == target.config.num_hidden_layers  # the target is restored
    # the drafter's weights are copies: training it never touches the target
    assert (
        drafter.model.model.layers[0].mlp.up_proj.weight.data_ptr()
        != target.model.layers[0].mlp.up_proj.weight.data_ptr()
    )


def test_export_is_a_plain_causal_lm_recognised_as_layer_skip(tmp_path, target, tokenizer):
    out = export(LayerSkipDrafter.from_target(target, [0]), tmp_path / "drafter", tokenizer=tokenizer)
    config = json.loads((out / "config.json").read_text())
    assert config[LAYER_SKIP_KEY] == {"target_num_hidden_layers": 2, "skipped_layers": [0]}
    assert config["num_hidden_layers"] == 1 and config["architectures"] == ["LlamaForCausalLM"]
    assert read_export(out).family.kind == "layer_skip"  # not mistaken for a trained draft LM
    plain = AutoModelForCausalLM.from_pretrained(out).eval()  # as transformers' assistant_model loads it
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad(), skipping(target, [0]):
        torch.testing.assert_close(plain(ids).logits, target(input_ids=ids, use_cache=False).logits)
    assert (out / "tokenizer.json").is_file()


@pytest.mark.parametrize(
    "skip, message",
    [
        ([0, 1], "skips every one of the target's 2 layers; keep at least one"),
        ([1, 1], "must be distinct decoder layer indices in 0..1"),
        ([2], "must be distinct decoder layer indices in 0..1"),
    ],
)
def test_bad_skip_sets_are_one_clear_error(target, skip, message):
    with pytest.raises(HeadsError, match=message):
        check_skip_layers(skip, 2)
    with pytest.raises(HeadsError, match=message):
        LayerSkipDrafter.from_target(target, skip)


def test_greedy_speculative_decoding_with_the_skipped_target_equals_the_target(target, tokenizer, prompt_ids):
    drafter = LayerSkipDrafter.from_target(target, [1]).eval()
    proposer = DraftLMProposer(drafter.model, len(tokenizer))
    greedy, eos, vocab = SamplingParams(), {tokenizer.eos_token_id}, len(tokenizer)
    out, stats = speculative_generate(target, proposer, prompt_ids, 40, 3, greedy, eos_ids=eos, vocab_size=vocab)
    assert out == autoregressive_generate(target, prompt_ids, 40, greedy, eos_ids=eos, vocab_size=vocab)
    assert 0 < sum(stats.accept_counts) < 3 * len(stats.accept_counts)  # accepted often, not always
