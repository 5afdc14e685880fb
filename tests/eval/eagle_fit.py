"""A few optimizer steps of EAGLE-3 training on the target's own sampled text (test helper)."""

import torch

from heads.config import EagleConfig
from heads.eagle import Eagle3Drafter
from heads.vocab import build_draft_vocab, token_counts
from train.objectives import Eagle3TrainingTimeTest

LAYER_IDS = [0, 1, 2]  # the micro target has 2 layers: embeddings, after layer 0, final


def fit_eagle(target, steps: int = 60, draft_vocab_size: int = 400, seed: int = 0) -> Eagle3Drafter:
    torch.manual_seed(seed)
    prompt = torch.randint(5, target.config.vocab_size, (8, 4))
    ids = target.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=True, max_new_tokens=60, pad_token_id=0)
    mask = torch.ones_like(ids)
    vocab, _ = build_draft_vocab(token_counts(ids.tolist(), mask.tolist(), target.config.vocab_size), draft_vocab_size)
    drafter = Eagle3Drafter.from_target(EagleConfig(layer_ids=LAYER_IDS), target, vocab)
    objective = Eagle3TrainingTimeTest(target, LAYER_IDS, vocab.draft_to_target, steps=3)
    optimizer = torch.optim.AdamW([p for p in drafter.parameters() if p.requires_grad], lr=3e-3)
    batch = {"input_ids": ids, "attention_mask": mask, "loss_mask": mask}
    for _ in range(steps):
        loss, _ = objective(drafter, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return drafter.eval()


def fit_eagle1(target, steps: int = 60, seed: int = 0):
    from heads.eagle1 import Eagle1Drafter
    from train.objectives import Eagle1Distillation

    torch.manual_seed(seed)
    prompt = torch.randint(5, target.config.vocab_size, (8, 4))
    ids = target.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=True, max_new_tokens=60, pad_token_id=0)
    mask = torch.ones_like(ids)
    drafter = Eagle1Drafter.from_target(EagleConfig(kind="eagle1"), target)
    objective = Eagle1Distillation(target, target.config.vocab_size)
    optimizer = torch.optim.AdamW([p for p in drafter.parameters() if p.requires_grad], lr=3e-3)
    batch = {"input_ids": ids, "attention_mask": mask, "loss_mask": mask}
    for _ in range(steps):
        loss, _ = objective(drafter, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return drafter.eval()
