"""The Medusa objective: which positions each head learns, the decayed sum, per-head accuracy."""

import pytest
import torch
import torch.nn.functional as F

from heads.config import MedusaConfig
from heads.medusa import MedusaHeads
from train.setups.medusa import MedusaDistillation


@pytest.fixture
def batch(prompt_ids):
    a, b = prompt_ids[0][:30], prompt_ids[1][:22]
    ids = torch.zeros(2, 30, dtype=torch.long)
    ids[0], ids[1, :22] = torch.tensor(a), torch.tensor(b)
    attention = torch.zeros_like(ids)
    attention[0], attention[1, :22] = 1, 1
    loss_mask = torch.zeros_like(ids)
    loss_mask[0, 12:], loss_mask[1, 5:] = 1, 1  # row 1's padding is outside the attention mask
    return {"input_ids": ids, "attention_mask": attention, "loss_mask": loss_mask}


@pytest.mark.parametrize("loss", ["ce", "fkl"])
def test_loss_is_the_decayed_sum_over_heads_of_their_shifted_targets(target, batch, loss):
    torch.manual_seed(0)
    heads = MedusaHeads.from_target(MedusaConfig(num_heads=3), target)
    with torch.no_grad():
        for name, p in heads.named_parameters():
            if "blocks" in name:
                p.normal_(0, 0.05)
    V = target.config.vocab_size
    total, metrics = MedusaDistillation(target, 3, loss, V, loss_decay=0.5)(heads, batch)

    out = target(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True)
    expected = 0.0
    for k in range(3):
        per_pos, hits = [], []
        for b in range(2):
            for t in range(30 - k - 2):
                if batch["loss_mask"][b, t + k + 2] and batch["attention_mask"][b, t + k + 2]:
                    logits = heads(out.hidden_states[-1][b, t])[k]
                    label = batch["input_ids"][b, t + k + 2]
                    if loss == "ce":
                        per_pos.append(F.cross_entropy(logits[None], label[None]))
                    else:  # KL(p ‖ q) with p = the target's distribution for that same token
                        log_p, log_q = out.logits[b, t + k + 1].log_softmax(-1), logits.log_softmax(-1)
                        per_pos.append((log_p.exp() * (log_p - log_q)).sum())
                    hits.append(float(logits.argmax() == label))
        expected = expected + 0.5**k * torch.stack(per_pos).mean()
        assert metrics[f"head{k}_top1"].item() == pytest.approx(sum(hits) / len(hits))
    torch.testing.assert_close(total, expected, rtol=1e-4, atol=1e-5)

    total.backward()
    assert all(p.grad is not None for p in heads.parameters())
    assert all(p.grad is None for p in target.parameters())  # the target stays frozen


def test_heads_with_no_valid_position_still_train_the_others(target, batch):
    batch = {
        **batch,
        "input_ids": batch["input_ids"][:, :4],
        "attention_mask": batch["attention_mask"][:, :4],
        "loss_mask": torch.ones(2, 4, dtype=torch.long),
    }
    heads = MedusaHeads.from_target(MedusaConfig(num_heads=3), target)
    total, metrics = MedusaDistillation(target, 3, "ce", target.config.vocab_size)(heads, batch)
    assert torch.isfinite(total) and metrics["head2_loss"] == 0  # head 2 needs t+4 < 4: no position
    total.backward()
