"""DFlash2: the block convolution and the selector's scores against vLLM's own code, a fresh DFlash2 computing
DFlash, the selector's walk, the export in vLLM's layout, and the settings checks."""

import json

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

from distill.features.capture import layer_features
from eval.proposer import TargetFeatures
from eval.proposers.dflash import DFlashProposer
from eval.proposers.dflash2 import DFlash2Proposer
from eval.sampling import SamplingParams
from heads.config import DFlash2Config, DFlashConfig
from heads.dflash import DFlashDrafter
from heads.dflash2 import DFlash2Drafter, grouped_conv
from heads.errors import HeadsError
from heads.families import FAMILIES, read_export
from tests.exporting import export
from tests.test_families import _compose
from train.stages.preflight import check_run

MASK = 3
LAYERS = [1, 2]


def _drafter(target, trained=True) -> DFlash2Drafter:
    """A random drafter; `trained`: its convolutions and successor codebook moved off their identity/zero init."""
    torch.manual_seed(0)
    cfg = DFlash2Config(layer_ids=LAYERS, block_size=5, conv_kernel_size=3, conv_group_size=8, selector_rank=8)
    drafter = DFlash2Drafter.from_target(cfg, target, MASK)
    if trained:
        with torch.no_grad():
            for name, p in drafter.named_parameters():
                if "conv" in name or "successor" in name:
                    p.add_(torch.randn_like(p) * (0.3 if "conv" in name else 3.0))
    return drafter.eval()


def _proposer(cls, drafter, target, ids):
    features, _ = layer_features(target, torch.tensor([ids[:-1]]), None, LAYERS)
    proposer = cls(drafter, target.config.vocab_size)
    proposer.reset(1, torch.device("cpu"))
    proposer.accept([len(ids) - 1], TargetFeatures(features, torch.ones(1, len(ids) - 1, dtype=torch.bool)))
    return proposer


@pytest.fixture(scope="module")
def vllm_dflash2():
    return pytest.importorskip("vllm.model_executor.models.qwen3_dflash2", reason="vLLM is not installed")


def test_the_block_convolution_is_vllms(vllm_dflash2):
    torch.manual_seed(0)
    B, W, H, T, G = 2, 5, 32, 3, 8
    x, delta, base = torch.randn(B, 2 * W, H), torch.randn(B, 2 * W, T, H // G), torch.randn(T, H)
    ours = grouped_conv(x, delta, base, W, G)
    rows = x.reshape(-1, H)  # vLLM: every request's block of W rows, one after the other
    theirs = vllm_dflash2._grouped_conv(rows, delta.reshape(-1, T, H // G), base, W, H // G, G, T)
    assert torch.allclose(ours.reshape(-1, H), theirs, atol=1e-5)


def test_the_selectors_scores_are_vllms(target, vllm_dflash2):
    drafter = _drafter(target)
    selector, k, L = drafter.candidate_selector, 4, 3
    torch.manual_seed(1)
    hidden, anchor = torch.randn(2, L, target.config.hidden_size), torch.tensor([7, 9])
    unary, ids = torch.randn(2, L, 100).topk(k, dim=-1)
    prev = torch.cat([anchor[:, None, None].expand(2, 1, k), ids[:, :-1]], 1)  # (2, L, k): anchor, then step l − 1's
    with torch.no_grad():
        ours = unary[..., None, :] + selector.transition(prev, hidden, ids)
        theirs = vllm_dflash2._score_edges(
            selector.predecessor_codebook,
            selector.successor_codebook,
            ids,
            unary,
            selector.hidden_projection(hidden),
            anchor,
            k,
        )
    assert torch.allclose(ours, theirs, atol=1e-5)


def test_a_fresh_dflash2_drafts_what_its_dflash_drafts(target, prompt_ids):
    """Identity convolutions and a zero successor codebook: the block and the walk reduce to DFlash's argmax."""
    fresh = _drafter(target, trained=False)
    dflash = DFlashDrafter(
        DFlashDrafter.arch_class(
            **{k: v for k, v in vars(fresh.arch).items() if "conv" not in k and "selector" not in k}
        )
    ).share(target)
    dflash.load_state_dict(fresh.state_dict(), strict=False)
    ids = prompt_ids[2]
    proposals = [
        _proposer(cls, d, target, ids).propose([ids], 4, SamplingParams()).draft_tokens
        for cls, d in ((DFlash2Proposer, fresh), (DFlashProposer, dflash.eval()))
    ]
    assert torch.equal(*proposals)


def test_the_walk_picks_the_best_candidate_after_the_one_picked_before(target, prompt_ids):
    drafter, ids = _drafter(target), prompt_ids[0]
    proposal = _proposer(DFlash2Proposer, drafter, target, ids).propose([ids], 4, SamplingParams())
    proposer = _proposer(DFlash2Proposer, drafter, target, ids)
    with torch.no_grad():
        hidden = proposer.block_hidden([ids], 5)[0, 1:]
        values, cands = drafter.head(hidden).topk(drafter.arch.selector_top_k, dim=-1)
        s = drafter.candidate_selector
        prev, expected = ids[-1], []
        for i in range(4):
            score = (
                values[i]
                + (s.predecessor_codebook[prev] * s.hidden_projection(hidden[i])) @ s.successor_codebook[cands[i]].T
            )
            prev = int(cands[i, score.argmax()])
            expected.append(prev)
    assert proposal.draft_tokens[0].tolist() == expected
    assert expected != [int(c[0]) for c in cands]  # the transition changed the walk: the test tells them apart


def test_blocks_laid_out_side_by_side_are_each_computed_alone(target):
    """Training runs many anchor blocks in one forward: the convolution must not cross from one into the next."""
    drafter = _drafter(target)
    S, F, W = 6, 2 * target.config.hidden_size, 5
    torch.manual_seed(3)
    context = drafter.context_kv(torch.randn(1, S, F), torch.arange(S)[None])
    blocks = [torch.tensor([[40] + [MASK] * 4]), torch.tensor([[41] + [MASK] * 4])]
    positions = [torch.arange(3, 3 + W)[None], torch.arange(5, 5 + W)[None]]
    seen = [torch.arange(S) < 3, torch.arange(S) < 5]
    alone = []
    with torch.no_grad():
        for tokens, pos, ctx in zip(blocks, positions, seen):
            mask = torch.cat([ctx.expand(1, W, S), torch.ones(1, W, W, dtype=torch.bool)], -1)
            alone.append(drafter.block_hidden(tokens, pos, context, mask))
        own = torch.block_diag(torch.ones(W, W), torch.ones(W, W)).bool()[None]
        mask = torch.cat([torch.cat([seen[0].expand(W, S), seen[1].expand(W, S)])[None], own], -1)
        together = drafter.block_hidden(torch.cat(blocks, 1), torch.cat(positions, 1), context, mask)
    assert torch.allclose(together, torch.cat(alone, 1), atol=1e-5)


def test_export_is_vllms_layout_and_round_trips(tmp_path, target, prompt_ids):
    drafter = _drafter(target)
    out = export(drafter, tmp_path / "d")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["DFlash2DraftModel"] and config["model_type"] == "qwen3"
    assert config["dflash_config"] == {
        "mask_token_id": MASK,
        "target_layer_ids": [0, 1],
        "conv_kernel_size": 3,
        "conv_group_size": 8,
        "selector_rank": 8,
        "selector_top_k": 8,
        "input_embedding_scale": 1.0,
        "output_multiplier": 1.0,
        "sample_from_anchor": False,
    }
    names = set(load_file(out / "model.safetensors"))
    H = target.config.hidden_size
    expected = {
        "layers.0.attention_conv.base_kernel": (2, 3, H),
        "layers.0.mlp_conv.kernel_projection.weight": (2 * 3 * H // 8, H),
        "candidate_selector.predecessor_codebook": (target.config.vocab_size, 8),
        "candidate_selector.successor_codebook": (target.config.vocab_size, 8),
        "candidate_selector.hidden_projection.weight": (8, H),
    }
    tensors = load_file(out / "model.safetensors")
    assert {k: tuple(tensors[k].shape) for k in expected} == expected
    assert not any(n.startswith(("model.", "embed_tokens", "lm_head")) for n in names)
    family = read_export(out).family
    assert family is FAMILIES["dflash2"]
    loaded = family.load(out, target)
    ids = prompt_ids[1]
    proposals = [
        _proposer(DFlash2Proposer, d, target, ids).propose([ids], 4, SamplingParams()).draft_tokens
        for d in (drafter, loaded)
    ]
    assert torch.equal(*proposals)


def test_dflash_and_dflash2_exports_are_told_apart(tmp_path, target):
    cfg = DFlashConfig(layer_ids=LAYERS, block_size=5)
    dflash = export(DFlashDrafter.from_target(cfg, target, MASK), tmp_path / "a")
    dflash2 = export(_drafter(target), tmp_path / "b")
    assert read_export(dflash).family is FAMILIES["dflash"] and read_export(dflash2).family is FAMILIES["dflash2"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("drafter.conv_group_size=24", r"drafter.conv_group_size=24 must divide the hidden size 64"),
        ("drafter.conv_kernel_size=9", r"drafter.conv_kernel_size=9 must be in 1..block_size=8"),
        ("drafter.selector_top_k=1", r"drafter.selector_top_k=1 ≥ 2"),
    ],
)
def test_bad_settings_stop_the_run_before_any_work(override, message):
    cfg = OmegaConf.to_object(_compose("recipe=toy_dflash2", "target=micro", "drafter.layer_ids=[1,2]", override))
    with pytest.raises(HeadsError, match=message) as e:
        check_run(cfg)
    assert "\n" not in str(e.value)
