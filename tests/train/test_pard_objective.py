"""PARD's objective: where the masks go, what each slot sees and predicts, and that training computes
exactly what the drafter computes when it drafts a block at serving time."""

import pytest
import torch

from heads.config import PardConfig
from heads.pard import PardDrafter
from train.setups.pard import PardDistillation, anchor_positions, masked_block_inputs

MASK = 7


def test_masks_follow_their_anchor_at_true_positions_and_see_only_its_prefix():
    ids = torch.tensor([[10, 11, 12, 13, 14]])
    attention = torch.tensor([[1, 1, 1, 1, 0]])  # the last token is padding
    anchors, valid = torch.tensor([[1, 3]]), torch.tensor([[True, False]])
    ids_out, positions, see = masked_block_inputs(ids, attention, anchors, valid, num_masks=2, mask_token=MASK)
    assert ids_out.tolist() == [[10, 11, 12, 13, 14, MASK, MASK, MASK, MASK]]
    assert positions.tolist() == [[0, 1, 2, 3, 4, 2, 3, 4, 5]]  # anchor 1 → masks at 2, 3; anchor 3 → 4, 5
    T, F = True, False
    expected = [
        # real tokens: causal, padding never seen
        [T, F, F, F, F, F, F, F, F],
        [T, T, F, F, F, F, F, F, F],
        [T, T, T, F, F, F, F, F, F],
        [T, T, T, T, F, F, F, F, F],
        [T, T, T, T, F, F, F, F, F],
        # anchor 1's masks: tokens 0..1, then their own earlier masks
        [T, T, F, F, F, T, F, F, F],
        [T, T, F, F, F, T, T, F, F],
        # an invalid anchor's slots see themselves only among masks (no row is empty); their loss never counts
        [T, T, T, T, F, F, F, T, F],
        [T, T, T, T, F, F, F, F, T],
    ]
    assert see[0].tolist() == expected


def test_anchors_are_positions_whose_next_token_counts():
    counts = torch.tensor([[0, 0, 1, 1, 0, 0], [0, 1, 0, 0, 0, 0]]).bool()
    torch.manual_seed(0)
    anchors, valid = anchor_positions(counts, 3)
    row0 = sorted(a for a, v in zip(anchors[0].tolist(), valid[0].tolist()) if v)
    row1 = sorted(a for a, v in zip(anchors[1].tolist(), valid[1].tolist()) if v)
    assert row0 == [1, 2] and row1 == [0]  # next token t+1 assistant-written; fewer candidates → invalid pads


class _Oracle(torch.nn.Module):
    """A 'drafter' whose logits at position p put all mass on sequence[p + shift]: it is right iff the
    objective labels the slot at position p with token p + 1."""

    def __init__(self, sequence, shift):
        super().__init__()
        self.sequence, self.shift = sequence, shift
        self.bias = torch.nn.Parameter(torch.zeros(()))

    def forward(self, input_ids, attention_mask, position_ids):
        B, L = input_ids.shape
        index = (position_ids + self.shift).clamp(max=self.sequence.shape[1] - 1)
        logits = torch.full((B, L, 64), -30.0) + self.bias
        logits.scatter_(2, self.sequence.gather(1, index)[..., None], 30.0)
        return type("Out", (), {"logits": logits})


def test_every_slot_is_labelled_with_the_token_after_its_position():
    torch.manual_seed(0)
    seq = torch.randint(8, 64, (2, 12))
    batch = {"input_ids": seq, "attention_mask": torch.ones_like(seq), "loss_mask": torch.ones_like(seq)}
    target = _Oracle(seq, 1)  # the teacher is the same oracle: its logits at p predict token p + 1
    objective = PardDistillation(
        lambda input_ids, attention_mask: target(input_ids, attention_mask, torch.arange(12).expand(2, 12)),
        "ce",
        64,
        pard_token=MASK,
        max_draft_tokens=4,
        anchors_per_sequence=3,
    )
    right, metrics = objective(_Oracle(seq, 1), batch)
    wrong, _ = objective(_Oracle(seq, 0), batch)
    assert right.item() < 1e-6 and wrong.item() > 10
    assert metrics["top1_agreement"] == 1 and all(metrics[f"mask{i}_top1"] == 1 for i in (1, 2, 3))
    assert metrics["sim_tau"].item() == pytest.approx(5.0)  # 1 + four slots always right

    def no_teacher(input_ids, attention_mask):
        raise AssertionError("ce trains on the samples' own tokens: the target must not run")

    objective.target = no_teacher  # a step costs the drafter's forward alone (the main job's data is greedy)
    again, same = objective(_Oracle(seq, 1), batch)
    assert again.item() == right.item() and same["sim_tau"].item() == pytest.approx(5.0)


def test_training_forward_equals_the_block_the_drafter_drafts_at_serving_time(target, tokenizer, prompt_ids):
    torch.manual_seed(0)
    cfg = PardConfig(hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=2)
    drafter = PardDrafter.from_config(cfg, target.config, tokenizer, pard_token=MASK).eval()
    seq = torch.tensor([prompt_ids[0][:20]])
    anchors, valid = torch.tensor([[4, 11]]), torch.tensor([[True, True]])
    ids, positions, see = masked_block_inputs(seq, torch.ones_like(seq), anchors, valid, 3, MASK)
    bias = torch.zeros(see.shape).masked_fill(~see, torch.finfo(torch.float32).min)[:, None]
    with torch.no_grad():
        train_logits = drafter(ids, attention_mask=bias, position_ids=positions).logits
        for a, t in enumerate([4, 11]):
            # serving: [x_0 … x_t, MASK, MASK, MASK] under the model's own causal mask
            block = torch.cat([seq[:, : t + 1], torch.full((1, 3), MASK)], 1)
            serve_logits = drafter(block).logits[0, t:]  # the bonus slot and the 3 masks
            slots = torch.cat([train_logits[0, t : t + 1], train_logits[0, 20 + 3 * a : 23 + 3 * a]])
            torch.testing.assert_close(slots, serve_logits, rtol=1e-4, atol=1e-4)


def test_gradients_reach_the_mask_row_and_leave_the_target_alone(target, tokenizer, prompt_ids):
    torch.manual_seed(0)
    cfg = PardConfig(hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=2)
    drafter = PardDrafter.from_config(cfg, target.config, tokenizer, pard_token=MASK)
    seq = torch.tensor([prompt_ids[0][:24], prompt_ids[1][:24]])
    batch = {"input_ids": seq, "attention_mask": torch.ones_like(seq), "loss_mask": torch.ones_like(seq)}
    objective = PardDistillation(target, "fkl", 512, pard_token=MASK, max_draft_tokens=4, anchors_per_sequence=4)
    loss, metrics = objective(drafter, batch)
    loss.backward()
    embedding = drafter.model.get_input_embeddings().weight.grad
    assert embedding[MASK].abs().sum() > 0  # the mask's row is learned
    assert all(p.grad is None for p in target.parameters())
    assert metrics["positions"] == 46 and torch.isfinite(loss)
