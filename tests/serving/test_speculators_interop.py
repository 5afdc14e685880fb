"""EAGLE-3 checkpoints made by the `speculators` library (its own classes, its own save_pretrained) evaluate in
drafthub as vLLM serves them, and drafthub's exports load in speculators.

speculators pins torchvision/torchaudio, which would replace the CPU torch; it imports neither, so the test
command installs it with `pip install --no-deps speculators==0.9.0 hs-connectors==0.9.0`.
"""

import json
from dataclasses import replace

import pytest
import torch

from eval.config import EvalConfig
from heads.formats.speculators import load_speculators
from tests.eval.eagle_fit import fit_eagle
from tests.exporting import export
from tests.serving.settings import SERVED

speculators = pytest.importorskip("speculators", reason="pip install --no-deps speculators==0.9.0 hs-connectors==0.9.0")

needs_vllm = pytest.mark.needs_vllm
CFG = replace(SERVED, num_prompts=EvalConfig().num_prompts)


def saved_by_speculators(ours, target_dir, path, **flags):
    """`ours`'s weights in speculators' own Eagle3DraftModel, saved by it; its optional norms set to `flags`
    (their weights away from 1, as if trained)."""
    from speculators import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import LlamaConfig

    a = ours.arch
    layer = LlamaConfig(
        vocab_size=a.vocab_size,
        hidden_size=a.hidden_size,
        intermediate_size=a.intermediate_size,
        num_hidden_layers=1,
        num_attention_heads=a.num_attention_heads,
        num_key_value_heads=a.num_key_value_heads,
        head_dim=a.head_dim,
        rms_norm_eps=a.rms_norm_eps,
        max_position_embeddings=a.max_position_embeddings,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": a.rope_theta},  # no flat rope_theta, as speculators
    )
    layer._attn_implementation = "eager"
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer,
        draft_vocab_size=a.draft_vocab_size,
        eagle_aux_hidden_state_layer_ids=list(a.layer_ids),
        norm_before_residual=a.norm_before_residual,
        **flags,
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
            default_proposal_method="greedy",
            verifier=VerifierConfig.from_pretrained(str(target_dir)),
        ),
    )
    model = Eagle3DraftModel(config)
    if a.draft_vocab_size != a.vocab_size:
        model.load_vocab_mappings(ours.t2d, ours.d2t)
    _, unexpected = model.load_state_dict(ours.state_dict(), strict=False)
    assert not [k for k in unexpected if k not in ("d2t", "t2d")], unexpected
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith(("input_norm.", "fc_norm.")):
                p.uniform_(0.8, 1.2)
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def fitted(target):
    return {"reduced": fit_eagle(target), "full": fit_eagle(target, draft_vocab_size=target.config.vocab_size)}


VARIANTS = {
    # speculators' own save (target_hidden_size null, rope_parameters only) with a reduced vocabulary (d2t/t2d),
    # one norm over all features before fc, and "EAGLE 3.1": the next position reads norm(h)
    "reduced vocabulary, norm_before_fc + norm_output": ("reduced", {"norm_before_fc": True, "norm_output": True}),
    # the full vocabulary, saved without d2t/t2d, and a norm per target layer's features
    "full vocabulary, fc_norm": ("full", {"fc_norm": True}),
}


@needs_vllm
@pytest.mark.parametrize("variant", VARIANTS, ids=list(VARIANTS))
def test_a_checkpoint_saved_by_speculators_is_measured_as_vllm_serves_it(
    variant, fitted, target, tokenizer, micro_world, prompt_ids, tmp_path
):
    from tests.serving.test_served_check import _serve

    vocab, flags = VARIANTS[variant]
    path = saved_by_speculators(fitted[vocab], micro_world.target_dir, tmp_path / "spec", **flags)
    config = json.loads((path / "config.json").read_text())
    assert config["target_hidden_size"] is None and "rope_theta" not in config["transformer_layer_config"]
    report = _serve(target, tokenizer, micro_world, path, prompt_ids, cfg=CFG)
    served = report["served"]
    assert served["equal_prompts"] == len(prompt_ids) and served["verdict"] == "ok", served["reason"]
    ours = 1 + sum(report["per_position_acceptance"])  # τ as vLLM counts it
    assert abs(served["tau"] - ours) <= 0.05 * ours and ours > 1.0, (served["tau"], ours)


@pytest.mark.needs_peers
def test_speculators_loads_drafthubs_export_with_its_recorded_verifier(fitted, target, micro_world, tmp_path):
    from speculators.models.eagle3 import Eagle3DraftModel

    ours = fitted["reduced"]
    verifier = {"name_or_path": str(micro_world.target_dir), "architectures": ["LlamaForCausalLM"]}
    out = export(ours, tmp_path / "ours", verifier=verifier, num_speculative_tokens=3)
    theirs = Eagle3DraftModel.from_pretrained(out)  # reads the verifier it names: config and weights
    state = theirs.state_dict()
    for name, value in ours.state_dict().items():
        torch.testing.assert_close(state[name].to(value.dtype), value, rtol=0, atol=0, msg=name)
    again = load_speculators(saved_by_speculators(ours, micro_world.target_dir, tmp_path / "spec"), target)
    for name, value in ours.state_dict().items():  # and speculators' own save reads back into the same drafter
        torch.testing.assert_close(again.state_dict()[name], value, rtol=0, atol=0, msg=name)
