"""Medusa heads: identity at init, vLLM-format export that loads back exactly."""

import json

import pytest
import torch
from safetensors import safe_open

from distill.features import final_hidden_states
from eval.medusa_proposer import MedusaProposer
from eval.sampling import SamplingParams
from heads.config import MedusaConfig
from heads.errors import HeadsError
from heads.families import FAMILIES, write_provenance
from heads.medusa import MedusaHeads
from heads.medusa_tree import build_tree
from tests.exporting import export


def test_fresh_heads_reproduce_the_targets_next_token_logits(target, prompt_ids):
    """W = 0, b = 0 and lm_head = the target's: at position t every head k (which will learn the
    token t+k+2) outputs exactly the target's logits for token t+1."""
    heads = MedusaHeads.from_target(MedusaConfig(num_heads=3, num_layers=2), target)
    ids = torch.tensor([prompt_ids[0]])
    hidden, logits = final_hidden_states(target, ids)
    for head_logits in heads(hidden):
        torch.testing.assert_close(head_logits, logits)


def _trained_like(target, num_heads=4, seed=0):
    """Heads with non-trivial blocks and biases, as after training."""
    torch.manual_seed(seed)
    heads = MedusaHeads.from_target(MedusaConfig(num_heads=num_heads, num_layers=2), target)
    with torch.no_grad():
        for name, p in heads.named_parameters():
            if "blocks" in name:
                p.normal_(0, 0.05)
    return heads.eval()


def test_export_is_vllm_medusa_format_and_round_trips_exactly(tmp_path, target):
    heads = _trained_like(target)
    heads.tree = build_tree([[0.6, 0.2, 0.1], [0.4, 0.2, 0.1], [0.3, 0.1, 0.1], [0.2, 0.1, 0.05]], 12)
    heads.calibration = {"head_accuracy": [[0.6]], "expected_tau": 2.0}
    provenance = {
        "kind": "medusa",
        "model_name": "m",
        "target": {"name_or_path": "toyworld:micro"},
        "recipe": {"recipe_name": "test"},
        "eval": {"tau": 1.8, "alpha": 0.3, "speedup": 1.1, "lossless": True},
    }
    out = export(heads, tmp_path / "drafter")
    write_provenance(out, {**FAMILIES["medusa"].describe(out, {}), **provenance})  # as the publish stage adds it

    config = json.loads((out / "config.json").read_text())
    H, V = target.config.hidden_size, target.config.vocab_size
    assert config["model_type"] == "medusa" and config["architectures"] == ["MedusaModel"]
    assert {k: config[k] for k in ("num_heads", "num_hidden_layers", "hidden_size", "vocab_size")} == {
        "num_heads": 4,
        "num_hidden_layers": 2,
        "hidden_size": H,
        "vocab_size": V,
    }
    assert config["medusa_fc_bias"] is True  # else vLLM builds bias-free blocks and drops our biases
    # vLLM renames every config key holding "num" and "heads"/"layers"; ours must be only these two.
    assert [k for k in config if "num" in k and ("heads" in k or "layers" in k)] == ["num_heads", "num_hidden_layers"]
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    expected = {f"lm_heads.{h}.weight": (V, H) for h in range(4)}
    expected |= {
        f"blocks.{h}.layers.{layer}.{p}": (H, H) if p == "weight" else (H,)
        for h in range(4)
        for layer in range(2)
        for p in ("weight", "bias")
    }
    assert shapes == expected
    card = (out / "README.md").read_text()
    assert (
        card.startswith("---\nlibrary_name: vllm")
        and '"method": "medusa", "model": "THIS_DIRECTORY", "num_speculative_tokens": 4}' in card
    )
    assert json.loads((out / "drafthub.json").read_text())["kind"] == "medusa"

    loaded = MedusaHeads.from_pretrained(out).eval()
    for (name, a), (_, b) in zip(heads.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    assert loaded.tree == heads.tree and loaded.calibration == heads.calibration
    hidden = torch.randn(2, H)
    for tree in (None, heads.tree):
        proposals = []
        for h in (heads, loaded):
            proposer = MedusaProposer(h, V, tree)
            proposer.reset(2, torch.device("cpu"))
            proposer.hidden = hidden
            proposals.append(proposer.propose([[1], [1]], 4, SamplingParams()))
        assert torch.equal(proposals[0].draft_tokens, proposals[1].draft_tokens)


def test_loading_a_mismatched_checkpoint_is_one_clear_error(tmp_path, target):
    heads = _trained_like(target, num_heads=2)
    heads.save_pretrained(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps({**config, "num_heads": 3}))
    with pytest.raises(HeadsError, match="does not match its config: missing"):
        MedusaHeads.from_pretrained(tmp_path / "m")
    with pytest.raises(HeadsError, match="is not a Medusa checkpoint"):
        MedusaHeads.from_pretrained(tmp_path / "nowhere")


def test_vllm_style_configs_load_and_broken_checkpoints_are_clear_errors(tmp_path, target):
    heads = _trained_like(target, num_heads=2)
    heads.save_pretrained(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    # Medusa's original configs say medusa_num_heads / medusa_num_layers; vLLM renames them, so do we.
    renamed = {("medusa_" + k if k in ("num_heads", "num_hidden_layers") else k): v for k, v in config.items()}
    (tmp_path / "m" / "config.json").write_text(json.dumps(renamed))
    assert MedusaHeads.from_pretrained(tmp_path / "m").num_heads == 2
    (tmp_path / "m" / "config.json").write_text(json.dumps({**config, "hidden_size": config["hidden_size"] * 2}))
    with pytest.raises(HeadsError, match="wrong shape"):
        MedusaHeads.from_pretrained(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text(json.dumps({**config, "original_lm_head": True}))
    with pytest.raises(HeadsError, match="not supported"):
        MedusaHeads.from_pretrained(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    (tmp_path / "m" / "medusa_tree.json").write_text(json.dumps({"paths": [[0], [1, 0]]}))
    with pytest.raises(HeadsError, match="is not a token tree"):
        MedusaHeads.from_pretrained(tmp_path / "m")
