"""Medusa heads: identity at init, vLLM-format export that loads back exactly."""

import json

import pytest
import torch
from safetensors import safe_open

from distill.features.capture import final_hidden_states
from eval.proposers.medusa import MedusaProposer
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


def _original_layout(heads: MedusaHeads, path, layout: str):
    """`heads` saved as FasterDecoding/Medusa saves them: Medusa-1 (.safetensors or .pt), head-only "medusa2",
    or a Medusa-2 full model (prefixed heads beside the base model's weights). The config miscounts the heads,
    as released ones do."""
    from safetensors.torch import save_file

    path.mkdir()
    config = {"medusa_num_heads": heads.num_heads + 3, "medusa_num_layers": heads.num_layers}
    tensors = {}
    for h in range(heads.num_heads):
        for layer, linear in enumerate(heads.blocks[h].layers):
            tensors[f"{h}.{layer}.linear.weight"] = linear.weight.detach().clone()
            tensors[f"{h}.{layer}.linear.bias"] = linear.bias.detach().clone()
        if layout != "medusa2":
            tensors[f"{h}.{heads.num_layers}.weight"] = heads.lm_heads[h].weight.detach().clone()
    if layout == "medusa1.pt":
        torch.save(tensors, path / "medusa_lm_head.pt")
    elif layout == "full":
        config |= {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": heads.hidden_size}
        save_file(
            {f"medusa_head.{k}": v for k, v in tensors.items()} | {"model.norm.weight": torch.ones(2)},
            str(path / "model.safetensors"),
        )
    else:
        save_file(tensors, str(path / "medusa_lm_head.safetensors"))
        config |= {"version": "2"} if layout == "medusa2" else {}
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("layout", ["medusa1", "medusa1.pt", "medusa2", "full"])
def test_original_medusa_checkpoints_are_refused_by_name_and_convert_exactly(tmp_path, target, micro_world, layout):
    from heads.families import read_export

    heads = _trained_like(target, num_heads=2)  # lm_heads start as the target's: what head-only heads read
    src = _original_layout(heads, tmp_path / "original", layout)
    with pytest.raises(
        HeadsError,
        match=r"FasterDecoding/Medusa's original layout; convert them first: python "
        r"scripts/convert_medusa.py",
    ):
        read_export(src)  # never routed to another family (a full model is no draft LM)
    code, out = _convert(src, tmp_path / "converted", micro_world.target_dir)
    assert code == 0 and "2 Medusa heads × 2 layers" in out, out
    assert "config.json says 5 heads; the weights hold 2" in out
    converted = MedusaHeads.from_pretrained(tmp_path / "converted")
    assert read_export(tmp_path / "converted").family.kind == "medusa"
    hidden = torch.randn(3, heads.hidden_size)
    for ours, theirs in zip(converted(hidden), heads(hidden)):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)  # a rename: the very same heads


def _convert(src, dst, target_dir):
    import contextlib
    import io

    from tests.conftest import import_script

    main = import_script("convert_medusa").main
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main([str(src), str(dst), "--target", str(target_dir)])
    return code, out.getvalue()


def test_head_only_medusa_needs_its_target_and_a_mismatched_target_is_refused(tmp_path, target, micro_world):
    from heads.convert.medusa_original import convert_original_medusa

    src = _original_layout(_trained_like(target, num_heads=2), tmp_path / "original", "medusa2")
    with pytest.raises(HeadsError, match="share the target's lm_head; pass the target"):
        convert_original_medusa(src)
    with pytest.raises(HeadsError, match="do not fit a target whose lm_head is"):
        convert_original_medusa(src, torch.zeros(7, 5))
    code, out = _convert(src, tmp_path / "converted", micro_world.target_dir)
    assert code == 0
    code, out = _convert(src, tmp_path / "converted", micro_world.target_dir)  # never overwritten
    assert code == 2 and out.strip().splitlines() == [
        f"error: {tmp_path / 'converted'} exists; pass a new directory (nothing is overwritten)"
    ]
