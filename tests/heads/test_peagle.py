"""P-EAGLE: the parallel training forward, its objective's labels, checkpoints, export and settings checks."""

import json

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from heads.config import PEagleConfig
from heads.errors import HeadsError
from heads.families import get_family, read_export
from heads.families.peagle import load_peagle
from heads.peagle import PEagleDrafter, parallel_attention_mask
from heads.vocab import build_draft_vocab
from tests.exporting import export
from tests.test_families import _compose
from train.setups.peagle import PEagleParallelDrafting, pick_anchors
from train.stages.preflight import check_run

LAYER_IDS = [0, 1, 2]


@pytest.fixture(scope="module")
def drafter(target):
    torch.manual_seed(0)
    vocab, _ = build_draft_vocab(torch.ones(target.config.vocab_size), 64)
    cfg = PEagleConfig(layer_ids=LAYER_IDS, max_draft_tokens=4)
    return PEagleDrafter.from_target(cfg, target, vocab, mask_token_id=target.config.vocab_size - 1).eval()


def test_attention_mask_masks_see_their_anchor_prefix_and_earlier_masks_only():
    key_valid = torch.tensor([[True, True, True, True, False]])  # T = 5, the last entry is padding
    mask = parallel_attention_mask(key_valid, torch.tensor([[1, 3]]), 2)[0].int()  # anchors 1 and 3, 2 masks each
    # columns: real 0..4, then (anchor 1: mask 1, mask 2), (anchor 3: mask 1, mask 2)
    expected = torch.tensor(
        [
            [1, 0, 0, 0, 0, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0, 0, 0, 0],
            [1, 1, 1, 0, 0, 0, 0, 0, 0],
            [1, 1, 1, 1, 0, 0, 0, 0, 0],
            [1, 1, 1, 1, 0, 0, 0, 0, 0],  # padding is seen by nobody (its own row is never read)
            [1, 1, 0, 0, 0, 1, 0, 0, 0],  # anchor 1, mask 1: real ≤ 1, itself
            [1, 1, 0, 0, 0, 1, 1, 0, 0],  # anchor 1, mask 2: real ≤ 1, masks 1–2 of anchor 1
            [1, 1, 1, 1, 0, 0, 0, 1, 0],  # anchor 3, mask 1: real ≤ 3 (4 is padding)
            [1, 1, 1, 1, 0, 0, 0, 1, 1],
        ]
    )
    assert torch.equal(mask, expected)


def test_parallel_forward_equals_decoding_each_anchor_block_as_vllm_feeds_it(drafter):
    """Real entries = EAGLE-3 step 0; the masks after anchor t = a decode of entries 0..t then the masks at t+1…"""
    torch.manual_seed(1)
    B, T, M, F_ = 2, 9, 3, 3 * drafter.arch.target_hidden_size
    features, ids = torch.randn(B, T, F_), torch.randint(0, drafter.arch.vocab_size, (B, T))
    anchors = torch.tensor([[0, 4, 6], [2, 3, 1]])
    real, masks = drafter.parallel_logits(features, ids, torch.ones(B, T), anchors, M)
    assert real.shape == (B, T, 64) and masks.shape == (B, 3, M, 64)
    with torch.no_grad():
        for b in range(B):
            cache = drafter.new_cache(1, "cpu")
            tokens = F.pad(ids[b : b + 1, 1:], (0, 1))
            out = drafter.decode(
                cache,
                drafter.fuse(features[b : b + 1]),
                tokens,
                torch.arange(T)[None],
                torch.ones(1, T, dtype=torch.bool),
            )
            assert torch.allclose(drafter.logits(out), real[b : b + 1], atol=1e-5)
            for a, t in enumerate(anchors[b].tolist()):
                cache = drafter.new_cache(1, "cpu")
                drafter.decode(
                    cache,
                    drafter.fuse(features[b : b + 1, : t + 1]),
                    tokens[:, : t + 1],
                    torch.arange(t + 1)[None],
                    torch.ones(1, t + 1, dtype=torch.bool),
                )
                for i in range(1, M + 1):  # one mask at a time, each appended to the cache
                    h = drafter.decode(
                        cache,
                        drafter.mask_entry()[None, None],
                        torch.tensor([[drafter.mask_token_id]]),
                        torch.tensor([[t + i]]),
                        torch.ones(1, 1, dtype=torch.bool),
                    )
                    assert torch.allclose(drafter.logits(h)[0, 0], masks[b, a, i - 1], atol=1e-5), (b, t, i)


def test_anchors_are_distinct_positions_whose_first_label_counts():
    counts = torch.zeros(3, 10, dtype=torch.bool)
    counts[0, 2:] = True  # every anchor 0..7 usable
    counts[1, [5, 9]] = True  # anchors 3 and 7 only
    anchors, ok = pick_anchors(counts, 4, torch.Generator().manual_seed(0))
    assert anchors.shape == (3, 4)
    assert ok[0].all() and len(set(anchors[0].tolist())) == 4
    assert sorted(anchors[1][ok[1]].tolist()) == [3, 7] and ok[1].sum() == 2
    assert not ok[2].any()


class _Oracle(torch.nn.Module):
    """Stands in for the drafter: puts all mass on a chosen target position's argmax for every slot."""

    def __init__(self, target_top, shift: int = 0):
        super().__init__()
        self.top, self.shift = target_top, shift

    def forward(self, features, input_ids, attention_mask, anchors, num_masks):
        B, T = input_ids.shape
        V = 16
        # slot (t, k) should predict token t+k+2, whose target distribution is at t+k+1
        real = F.one_hot(self.top[:, torch.arange(T).clamp(max=T - 2) + 1], V).float() * 50
        label = (anchors[:, :, None] + torch.arange(1, num_masks + 1) + 1 + self.shift).clamp(max=T - 1)
        masks = F.one_hot(self.top[torch.arange(B)[:, None, None], label], V).float() * 50
        return real, masks


def test_each_slot_is_trained_towards_the_target_distribution_of_its_own_token(monkeypatch):
    torch.manual_seed(0)
    B, T, V, K = 2, 12, 16, 4
    target_logits = torch.randn(B, T, V) * 3
    loss_mask = torch.ones(B, T, dtype=torch.long)
    loss_mask[1, :6] = 0  # row 1: only tokens 6… are assistant-written
    batch = {"input_ids": torch.randint(0, V, (B, T)), "attention_mask": torch.ones(B, T), "loss_mask": loss_mask}
    objective = PEagleParallelDrafting(None, LAYER_IDS, torch.arange(V), max_draft_tokens=K, anchors_per_sequence=3)
    monkeypatch.setattr(objective, "_target_signals", lambda batch: (torch.zeros(B, T, 3), target_logits))
    _, metrics = objective(_Oracle(target_logits.argmax(-1)), batch)
    assert (
        all(metrics[f"pos{k}_acc"] == 1 for k in range(K)) and metrics["sim_tau"] == K + 1
    )  # all K drafts and the bonus
    assert metrics["positions"] == (T - 2) + (T - 6)  # labels 2… in row 0, 6… in row 1
    _, shifted = objective(_Oracle(target_logits.argmax(-1), shift=-1), batch)  # masks one token early
    assert shifted["pos0_acc"] == 1 and shifted["pos1_acc"] < 0.5 and shifted["sim_tau"] < 2.5


def test_objective_runs_one_drafter_forward_and_reaches_every_trainable_tensor(target, drafter):
    from tests.eval.fitting import sampled_text

    batch = sampled_text(target)
    objective = PEagleParallelDrafting(
        target, LAYER_IDS, drafter.d2t + torch.arange(64), max_draft_tokens=4, anchors_per_sequence=4
    )
    calls = []
    handle = drafter.register_forward_hook(lambda *args: calls.append(1))
    try:
        loss, metrics = objective(drafter.train(), batch)
    finally:
        handle.remove()
        drafter.eval()
    loss.backward()
    assert len(calls) == 1 and torch.isfinite(loss) and {"sim_tau", "pos3_acc", "positions"} <= set(metrics)
    assert drafter.mask_hidden.grad is not None and drafter.mask_hidden.grad.abs().sum() > 0
    drafter.zero_grad()


def test_native_checkpoint_and_export_round_trip(tmp_path, drafter):
    drafter.save_pretrained(tmp_path / "native")
    native = PEagleDrafter.from_pretrained(tmp_path / "native")
    out = export(drafter, tmp_path / "drafter", num_speculative_tokens=3)
    config = json.loads((out / "config.json").read_text())
    assert config["speculators_model_type"] == "peagle" and config["speculators_config"]["algorithm"] == "peagle"
    assert config["mask_token_id"] == drafter.mask_token_id and "model_type" not in config
    assert read_export(out).family.kind == "peagle"  # and not eagle3
    loaded = load_peagle(out)
    for other in (native, loaded):
        assert other.mask_token_id == drafter.mask_token_id and other.max_draft_tokens == 4
        for name, value in drafter.state_dict().items():
            assert torch.equal(value, other.state_dict()[name]), name
    assert get_family("peagle").consumer("vllm").speculative_config(out, 3) == {
        "method": "eagle3",
        "model": str(out),
        "parallel_drafting": True,
        "num_speculative_tokens": 3,
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda c, t: t.update(mask_hidden=t["mask_hidden"][:-1]),
            r"mask_hidden has shape \(191,\), expected \(192,\)",
        ),
        (lambda c, t: t.pop("mask_hidden"), r"mask_hidden has shape None"),
        (lambda c, t: c.update(mask_token_id=512), r"mask_token_id=512 must be an id in 0..vocab_size−1 = 511"),
    ],
)
def test_linter_refuses_a_bad_mask(tmp_path, drafter, change, message):
    from safetensors.torch import load_file, save_file

    out = export(drafter, tmp_path / "drafter")
    config, tensors = json.loads((out / "config.json").read_text()), load_file(out / "model.safetensors")
    change(config, tensors)
    (out / "config.json").write_text(json.dumps(config))
    save_file(tensors, out / "model.safetensors")
    with pytest.raises(HeadsError, match=message):
        load_peagle(out)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("drafter.layer_ids=[2,1,0]", r"layer_ids=\[2, 1, 0\] must be 3 distinct ascending"),
        ("drafter.layer_ids=[0,1,1]", r"must be 3 distinct ascending"),
        ("drafter.max_draft_tokens=1", r"max_draft_tokens=1 must be ≥ 2"),
        ("drafter.mask_token_id=-3", r"mask_token_id=-3 must be a token id ≥ 0"),
        ("drafter.layer_ids=[0,1,5]", r"layer_ids=\[0, 1, 5\] must lie in 0..2 for this 2-layer target"),
        ("drafter.mask_token_id=512", r"drafter.mask_token_id=512 is outside the vocabulary \(0..511\)"),
        ("eval.num_speculative_tokens=9", r"num_speculative_tokens=9 exceeds drafter.max_draft_tokens=8"),
        ("eval.tree=dynamic", r"eval.tree=dynamic: this drafter proposes one block"),
    ],
)
def test_bad_settings_stop_the_run_before_any_work_with_one_line(override, message):
    base = ("recipe=toy_peagle", "target=micro", "drafter.layer_ids=[0,1,2]")
    cfg = OmegaConf.to_object(_compose(*base, override))
    with pytest.raises(Exception, match=message) as err:
        check_run(cfg)
    assert "\n" not in str(err.value)
    check_run(OmegaConf.to_object(_compose(*base)))  # the recipe itself is fine


def test_default_layer_ids_of_a_shallow_target_are_refused_up_front():
    cfg = OmegaConf.to_object(_compose("recipe=toy_peagle", "target=micro"))
    with pytest.raises(HeadsError, match=r"the default \[2, N//2, N−3\]; set them explicitly"):
        check_run(cfg)
