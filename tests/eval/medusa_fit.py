"""A few optimizer steps of Medusa training on the target's own greedy text (test helper)."""

import torch

from heads.medusa import MedusaHeads
from train.objectives import MedusaDistillation


def fit_heads(target, cfg, steps: int = 60, seed: int = 0) -> MedusaHeads:
    torch.manual_seed(seed)
    heads = MedusaHeads.from_target(cfg, target)
    prompt = torch.randint(5, target.config.vocab_size, (8, 4))
    ids = target.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=True, max_new_tokens=60, pad_token_id=0)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "loss_mask": torch.ones_like(ids)}
    objective = MedusaDistillation(target, cfg.num_heads, "ce", target.config.vocab_size)
    optimizer = torch.optim.AdamW(heads.parameters(), lr=3e-3)
    for _ in range(steps):
        loss, _ = objective(heads, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return heads.eval()
