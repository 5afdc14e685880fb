"""trainer.optimizer=muon: torch's Muon on the hidden matrices and AdamW on the rest, scheduled and resumed as one."""

from types import SimpleNamespace

import pytest
import torch
from accelerate.utils import DistributedType
from torch import nn

from train.errors import PipelineError
from train.optimizers import ADAMW_BETAS, MuonWithAdamW, build_optimizer


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed_tokens = nn.Embedding(11, 8)
        self.fc = nn.Linear(8, 8)  # weight: hidden (Muon); bias: a vector (AdamW)
        self.norm = nn.LayerNorm(8)
        self.lm_head = nn.Linear(8, 11, bias=False)

    def forward(self, ids):
        return self.lm_head(self.norm(self.fc(self.embed_tokens(ids))))


def _loss(model, step):
    ids = torch.arange(step, step + 6) % 11
    return nn.functional.cross_entropy(model(ids), (ids + 1) % 11)


def _train(model, optimizer, steps, scheduler=None, start=0):
    for step in range(start, start + steps):
        _loss(model, step).backward()
        optimizer.step()
        if scheduler:
            scheduler.step()
        optimizer.zero_grad(set_to_none=True)


def test_muon_steps_the_hidden_matrices_and_adamw_the_rest_under_one_schedule():
    cfg = SimpleNamespace(optimizer="muon", lr=0.02, weight_decay=0.01)
    model, reference = Tiny(), Tiny()
    optimizer = build_optimizer(model, cfg)
    muon, adamw = optimizer.inner
    assert [p.shape for g in muon.param_groups for p in g["params"]] == [model.fc.weight.shape]
    assert len([p for g in adamw.param_groups for p in g["params"]]) == 5  # embeddings, bias, norm ×2, lm_head
    halve = lambda step: 0.5**step  # noqa: E731
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, halve)
    optimizer.load_state_dict(optimizer.state_dict())  # as accelerate's prepare() does: the schedule still reaches
    _train(model, optimizer, 3, scheduler)

    # the same three steps by the two torch optimizers alone, each scheduled by its own LambdaLR
    hidden = [reference.fc.weight]
    rest = [p for n, p in reference.named_parameters() if n != "fc.weight"]
    alone = [
        torch.optim.Muon(hidden, lr=0.02, weight_decay=0.01, adjust_lr_fn="match_rms_adamw"),
        torch.optim.AdamW(rest, lr=0.02, weight_decay=0.01, betas=ADAMW_BETAS),
    ]
    schedules = [torch.optim.lr_scheduler.LambdaLR(opt, halve) for opt in alone]
    for step in range(3):
        _loss(reference, step).backward()
        for opt, schedule in zip(alone, schedules):
            opt.step(), schedule.step(), opt.zero_grad(set_to_none=True)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)
    assert [g["lr"] for g in optimizer.param_groups] == [0.02 * 0.5**3] * 2  # the schedule reached both


def test_muon_state_saves_and_resumes_to_the_uninterrupted_weights():
    cfg = SimpleNamespace(optimizer="muon", lr=0.02, weight_decay=0.0)
    whole = Tiny()
    _train(whole, build_optimizer(whole, cfg), 6)

    first = Tiny()
    optimizer = build_optimizer(first, cfg)
    _train(first, optimizer, 3)
    saved, weights = optimizer.state_dict(), {k: v.clone() for k, v in first.state_dict().items()}
    resumed = Tiny()
    resumed.load_state_dict(weights)
    again = build_optimizer(resumed, cfg)
    again.load_state_dict(saved)  # momentum buffers and AdamW moments, not a cold restart
    _train(resumed, again, 3, start=3)
    for (name, p), q in zip(resumed.named_parameters(), whole.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("launch", [DistributedType.DEEPSPEED, DistributedType.FSDP])
def test_muon_is_refused_where_the_matrices_are_sharded(launch):
    with pytest.raises(PipelineError, match="trainer.optimizer=muon orthogonalises whole matrices"):
        build_optimizer(Tiny(), SimpleNamespace(optimizer="muon", lr=0.01, weight_decay=0.0), launch)
    assert isinstance(build_optimizer(Tiny(), SimpleNamespace(optimizer="adamw", lr=0.01, weight_decay=0.0), launch),
                      torch.optim.AdamW)  # fmt: skip
    assert isinstance(MuonWithAdamW([], [nn.Parameter(torch.ones(2))], 0.1, 0.0), torch.optim.Optimizer)
