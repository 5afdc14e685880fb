"""DFlash: the training blocks, the block forward against a slow reference, the export, the settings checks."""

import json
import math

import pytest
import torch
from omegaconf import OmegaConf

from eval.errors import EvalError
from eval.proposer import TargetFeatures
from eval.proposers.dflash import DFlashProposer
from eval.sampling import SamplingParams
from heads.config import DFlashConfig
from heads.dflash import DFlashDrafter
from heads.errors import HeadsError
from heads.families import FAMILIES, read_export
from tests.exporting import export
from tests.test_families import _compose
from train.setups.block import anchor_blocks
from train.stages.preflight import check_run

MASK = 3


def _drafter(target, layers=2) -> DFlashDrafter:
    """A random drafter whose norm weights differ per layer (so a mixed-up k_norm shows)."""
    torch.manual_seed(0)
    cfg = DFlashConfig(layer_ids=[1, 2], block_size=5, num_hidden_layers=layers, num_key_value_heads=1)
    drafter = DFlashDrafter.from_target(cfg, target, MASK)
    with torch.no_grad():
        for name, p in drafter.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 2.0)
    return drafter.eval()


def test_anchor_blocks_place_anchors_masks_labels_and_attention_by_hand():
    # Prompt 0..2, answer 3..7 (row 0); row 1: answer 2..4, then padding.
    ids = torch.tensor([[10, 11, 12, 13, 14, 15, 16, 17], [20, 21, 22, 23, 24, 0, 0, 0]])
    attn = torch.tensor([[1] * 8, [1] * 5 + [0] * 3])
    loss = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 0, 0, 0]])
    torch.manual_seed(0)
    b = anchor_blocks(ids, attn, loss, block_size=3, num_anchors=4, mask_token_id=MASK)
    # Anchors: x_t and x_{t+1} assistant-written → row 0: 3, 4, 5, 6; row 1: 2, 3 (+ two padding blocks).
    assert b.anchors[0].tolist() == [3, 4, 5, 6]
    assert b.anchor_valid[0].all() and b.anchor_valid[1].sum() == 2
    assert sorted(b.anchors[1][b.anchor_valid[1]].tolist()) == [2, 3]
    # Block of anchor 4 (queries 3..5): [x_4, MASK, MASK] at positions 4, 5, 6.
    assert b.tokens[0, 3:6].tolist() == [14, MASK, MASK] and b.positions[0, 3:6].tolist() == [4, 5, 6]
    # Mask slot i predicts the token at its own position t + i; anchor 6's second slot (8) is past the end.
    assert b.label_positions[0].tolist() == [[4, 5], [5, 6], [6, 7], [7, 8]]
    assert b.label_valid[0].tolist() == [[True, True], [True, True], [True, True], [True, False]]
    # Row 1: anchor 3's slots predict 4 (answer) and 5 (padding: not counted).
    a3 = b.anchors[1].tolist().index(3)
    assert b.label_valid[1, a3].tolist() == [True, False]
    # Attention: context positions < anchor, the own block fully (bidirectional), no other block.
    T, m = 8, 12
    assert b.mask.shape == (2, m, T + m)
    for q in range(3, 6):  # anchor 4's queries
        assert b.mask[0, q, :T].tolist() == [True] * 4 + [False] * 4
        assert b.mask[0, q, T:].tolist() == [False] * 3 + [True] * 3 + [False] * 6
    q = 3 * a3
    assert b.mask[1, q, :T].tolist() == [True] * 3 + [False] * 5  # positions 0..2; padding never visible


def _rms(x, w, eps):
    return x / torch.sqrt(x.pow(2).mean() + eps) * w


def _rope(x, pos, theta):
    """Neox-style rotation of one head vector, written out pair by pair."""
    d, out = x.shape[0], x.clone()
    for j in range(d // 2):
        angle = pos * theta ** (-2 * j / d)
        c, s = math.cos(angle), math.sin(angle)
        out[j] = x[j] * c - x[j + d // 2] * s
        out[j + d // 2] = x[j + d // 2] * c + x[j] * s
    return out


@torch.no_grad()
def _slow_block(drafter, features, tokens, positions, visible):
    """One row: features (S, F), tokens/positions (m,), visible (m, S) context mask; every dot product by hand."""
    a, (embed, lm_head) = drafter.arch, drafter.shared
    eps, d, rep = a.rms_norm_eps, a.head_dim, a.num_attention_heads // a.num_key_value_heads
    ctx = torch.stack([_rms(drafter.fc.weight @ f, drafter.hidden_norm.weight, eps) for f in features])
    x = embed[tokens].clone()
    m = len(tokens)
    for layer in drafter.layers:
        at = layer.self_attn
        h = torch.stack([_rms(v, layer.input_layernorm.weight, eps) for v in x])
        out = torch.zeros(m, a.num_attention_heads * d)
        for i in range(m):
            for head in range(a.num_attention_heads):
                g = head // rep
                Wq = at.q_proj.weight[head * d : (head + 1) * d]
                Wk, Wv = at.k_proj.weight[g * d : (g + 1) * d], at.v_proj.weight[g * d : (g + 1) * d]
                q = _rope(_rms(Wq @ h[i], at.q_norm.weight, eps), float(positions[i]), a.rope_theta)
                keys, values = [], []
                for s in range(len(features)):
                    if visible[i, s]:
                        keys.append(_rope(_rms(Wk @ ctx[s], at.k_norm.weight, eps), float(s), a.rope_theta))
                        values.append(Wv @ ctx[s])  # context: no input_layernorm, no v norm
                for j in range(m):
                    keys.append(_rope(_rms(Wk @ h[j], at.k_norm.weight, eps), float(positions[j]), a.rope_theta))
                    values.append(Wv @ h[j])
                w = torch.softmax(torch.stack([q @ k for k in keys]) / math.sqrt(d), 0)
                out[i, head * d : (head + 1) * d] = sum(wi * v for wi, v in zip(w, values))
        x = x + out @ at.o_proj.weight.T
        mlp = layer.mlp
        for i in range(m):
            u = _rms(x[i], layer.post_attention_layernorm.weight, eps)
            x[i] = x[i] + mlp.down_proj.weight @ (
                torch.nn.functional.silu(mlp.gate_proj.weight @ u) * (mlp.up_proj.weight @ u)
            )
    return torch.stack([lm_head @ _rms(v, drafter.norm.weight, eps) for v in x])


def test_block_forward_equals_a_slow_reference(target):
    drafter = _drafter(target)
    S, F = 6, 2 * target.config.hidden_size
    features = torch.randn(1, S, F)
    tokens = torch.tensor([[42, MASK, MASK, MASK]])
    positions = torch.arange(S, S + 4)[None]
    visible = torch.ones(1, 4, S, dtype=torch.bool)
    visible[0, :, 4] = False  # an invalid context entry (a padding column) is skipped
    mask = torch.cat([visible, torch.ones(1, 4, 4, dtype=torch.bool)], -1)
    with torch.no_grad():
        fast = drafter(features, torch.arange(S)[None], tokens, positions, mask)[0]
    slow = _slow_block(drafter, features[0], tokens[0], positions[0], visible[0])
    assert torch.allclose(fast, slow, atol=1e-4, rtol=1e-4), (fast - slow).abs().max()


def test_incremental_context_cache_equals_a_recompute(target):
    drafter = _drafter(target)
    F = 2 * target.config.hidden_size
    chunks = [[5, 3], [2, 4], [3, 1]]  # ragged new features per row, per accept
    full = torch.randn(2, 10, F)
    proposer = DFlashProposer(drafter, target.config.vocab_size)
    proposer.reset(2, torch.device("cpu"))
    done = [0, 0]
    for counts in chunks:
        width = max(counts)
        states = torch.zeros(2, width, F)
        for b, c in enumerate(counts):
            states[b, :c] = full[b, done[b] : done[b] + c]
            done[b] += c
        valid = torch.arange(width)[None] < torch.tensor(counts)[:, None]
        proposer.accept([d + 1 for d in done], TargetFeatures(states, valid))
    assert proposer.fed == done == [10, 8]
    for b in range(2):
        fresh = drafter.context_kv(full[b : b + 1, : done[b]], torch.arange(done[b])[None])
        for layer, (k, v) in enumerate(fresh):
            keep = proposer.valid[b]
            assert torch.allclose(proposer.keys[layer][b][:, keep], k[0], atol=1e-6)
            assert torch.allclose(proposer.values[layer][b][:, keep], v[0], atol=1e-6)


def test_export_round_trip_gives_identical_proposals(tmp_path, target, prompt_ids):
    drafter = _drafter(target)
    out = export(drafter, tmp_path / "d")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"] and config["model_type"] == "qwen3"
    assert config["dflash_config"] == {"mask_token_id": MASK, "target_layer_ids": [0, 1]}
    assert config["eagle_aux_hidden_state_layer_ids"] == [1, 2] and "eagle_config" not in config
    from safetensors.torch import load_file

    names = set(load_file(out / "model.safetensors"))
    assert "fc.weight" in names and "layers.1.self_attn.k_norm.weight" in names
    assert not any(n.startswith(("model.", "embed_tokens", "lm_head")) or "mask_hidden" in n for n in names)
    family = read_export(out).family
    assert family is FAMILIES["dflash"]
    family.lint(out)
    loaded = family.load(out, target)
    ids = prompt_ids[0]
    from distill.features.capture import layer_features

    features, _ = layer_features(target, torch.tensor([ids[:-1]]), None, [1, 2])
    proposals = []
    for d in (drafter, loaded):
        proposer = DFlashProposer(d, target.config.vocab_size)
        proposer.reset(1, torch.device("cpu"))
        proposer.accept([len(ids) - 1], TargetFeatures(features, torch.ones(1, len(ids) - 1, dtype=torch.bool)))
        proposals.append(proposer.propose([ids], 4, SamplingParams()).draft_tokens)
    assert torch.equal(*proposals)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("drafter.block_size=1", r"drafter.block_size=1 must be ≥ 2"),
        ("drafter.layer_ids=[2,1]", r"drafter.layer_ids=\[2, 1\] must be distinct and ascending"),
        ("drafter.layer_ids=[1,3]", r"ids in 1..2 for this 2-layer target"),
        ("drafter.mask_token_id=512", r"mask_token_id=512 is outside the target's vocabulary of 512"),
    ],
)
def test_bad_settings_stop_the_run_before_any_work(override, message):
    cfg = OmegaConf.to_object(_compose("recipe=toy_dflash", "target=micro", "drafter.layer_ids=[1,2]", override))
    with pytest.raises(HeadsError, match=message) as e:
        check_run(cfg)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("eval.num_speculative_tokens=8", r"exceeds drafter.block_size − 1 = 7"),
        ("eval.tree=dynamic", r"eval.tree=dynamic: this drafter proposes one block"),
    ],
)
def test_eval_settings_the_block_rules_out_stop_the_run(override, message):
    cfg = OmegaConf.to_object(_compose("recipe=toy_dflash", "target=micro", "drafter.layer_ids=[1,2]", override))
    with pytest.raises(EvalError, match=message):
        check_run(cfg)
