"""Test helpers: drafters fitted briefly on the target's own text, and the first-token distribution check."""

import torch

from eval.sampling import SamplingParams, probs_from_logits
from eval.speculative import speculative_generate


def sampled_text(target, seed: int = 0) -> dict:
    """8 rows of the target's sampled text (64 tokens) as a training batch, every token counted."""
    torch.manual_seed(seed)
    prompt = torch.randint(5, target.config.vocab_size, (8, 4))
    ids = target.generate(
        prompt, attention_mask=torch.ones_like(prompt), do_sample=True, max_new_tokens=60, pad_token_id=0
    )
    mask = torch.ones_like(ids)
    return {"input_ids": ids, "attention_mask": mask, "loss_mask": mask}


def fit(drafter, objective, batch: dict, steps: int = 60, lr: float = 3e-3):
    """`steps` AdamW steps of `objective` on one batch; returns the drafter in eval mode."""
    optimizer = torch.optim.AdamW([p for p in drafter.parameters() if p.requires_grad], lr=lr)
    for _ in range(steps):
        loss, _ = objective(drafter, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return drafter.eval()


def assert_first_tokens_follow_the_target(
    target, proposer, ids: list[int], vocab_size: int, draws: int = 1500, engine=None
):
    """Sampled speculative decoding's first token is distributed as the target's warped p (engine: the path, if not
    the default dynamic one)."""
    params = SamplingParams(temperature=1.0, top_k=40)
    p = probs_from_logits(target(input_ids=torch.tensor([ids])).logits[0, -1, :vocab_size], params)
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros_like(p)
    for _ in range(draws):
        (out,), _ = speculative_generate(
            target,
            proposer,
            [ids],
            1,
            2,
            params,
            eos_ids=set(),
            vocab_size=vocab_size,
            generator=gen,
            **({"engine": engine} if engine is not None else {}),
        )
        counts[out[0]] += 1
    top = p.topk(5).indices
    assert torch.all((counts[top] / draws - p[top]).abs() <= 5 * torch.sqrt(p[top] * (1 - p[top]) / draws))
    assert counts[p == 0].sum() == 0  # top-k applied on the target side too
