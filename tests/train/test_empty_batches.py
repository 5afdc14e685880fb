"""A batch whose answers were all cut by max_seq_len trains as zero loss, never NaN."""

import math

import torch

from heads.config import DraftLMConfig
from heads.draft_lm import DraftLM
from train.setups.draft_lm import DraftLMDistillation


def test_no_answer_token_in_the_batch_gives_zero_loss_and_zero_gradient(target, tokenizer):
    torch.manual_seed(0)
    drafter = DraftLM.from_config(
        DraftLMConfig(hidden_size=32, intermediate_size=64, num_attention_heads=1, num_key_value_heads=1),
        target.config,
        tokenizer,
    )
    ids = torch.randint(0, len(tokenizer), (2, 12))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "loss_mask": torch.zeros_like(ids)}
    loss, metrics = DraftLMDistillation(target, "fkl", len(tokenizer))(drafter, batch)
    assert loss.item() == 0.0 and not math.isnan(metrics["top1_agreement"].item()) and metrics["positions"].item() == 0
    loss.backward()  # still part of the graph: every process of a data-parallel step must backward
    assert all(p.grad is None or not p.grad.any() for p in drafter.parameters())
