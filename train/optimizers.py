"""The drafter's optimizer (`trainer.optimizer`): AdamW, or Muon on the hidden matrices with AdamW on the rest.

Muon (Jordan et al. 2024; speculators' default) orthogonalises each 2-D weight's momentum; it is defined for hidden
matrices only, so embeddings, the lm_head and every vector (norms, biases) keep AdamW, as its authors do. torch's
`torch.optim.Muon` takes 2-D parameters alone, hence one optimizer object holding both, which accelerate, the
schedulers and checkpoints see as one: the learning-rate schedule scales every group, and its state saves and
resumes whole. Muon's update is scaled to AdamW's RMS (`match_rms_adamw`, Moonshot's rule), so one `trainer.lr`
serves both.
"""

from __future__ import annotations

import torch
from accelerate.utils import DistributedType
from torch import nn

from train.errors import PipelineError

OPTIMIZERS = ("adamw", "muon")
ADAMW_BETAS = (0.9, 0.95)
_NOT_HIDDEN = ("embed", "lm_head")  # 2-D but not hidden matrices: AdamW, as Muon's authors advise


class MuonWithAdamW(torch.optim.Optimizer):
    """torch's Muon over `hidden` (2-D) parameters and AdamW over `rest`, stepped, scheduled and saved as one."""

    def __init__(self, hidden: list[nn.Parameter], rest: list[nn.Parameter], lr: float, weight_decay: float):
        super().__init__([*hidden, *rest], {"lr": lr})
        self.inner = []
        if hidden:
            muon = torch.optim.Muon(hidden, lr=lr, weight_decay=weight_decay, adjust_lr_fn="match_rms_adamw")
            self.inner.append(muon)
        if rest:
            self.inner.append(torch.optim.AdamW(rest, lr=lr, weight_decay=weight_decay, betas=ADAMW_BETAS))
        self._link_groups()

    def _link_groups(self) -> None:
        """The inner optimizers' groups themselves: a scheduler setting "lr" here sets it where their steps read it.
        Relinked after every load_state_dict, which gives each inner optimizer new group dicts (accelerate's
        prepare() loads the state once to place it)."""
        self.param_groups = [group for opt in self.inner for group in opt.param_groups]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for opt in self.inner:
            opt.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.inner:
            opt.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return {"inner": [opt.state_dict() for opt in self.inner]}

    def load_state_dict(self, state_dict: dict) -> None:
        for opt, state in zip(self.inner, state_dict["inner"], strict=True):
            opt.load_state_dict(state)
        self._link_groups()


def build_optimizer(model: nn.Module, cfg, distributed_type=DistributedType.NO) -> torch.optim.Optimizer:
    """The trainable parameters' optimizer named by cfg.optimizer, at cfg.lr and cfg.weight_decay (before
    accelerate wraps model and optimizer, under the launch's distributed_type)."""
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW([p for _, p in named], lr=cfg.lr, weight_decay=cfg.weight_decay, betas=ADAMW_BETAS)
    if cfg.optimizer != "muon":
        raise PipelineError(f"trainer.optimizer={cfg.optimizer!r} is not an optimizer; use one of {list(OPTIMIZERS)}")
    if distributed_type in (DistributedType.DEEPSPEED, DistributedType.FSDP):
        raise PipelineError(
            "trainer.optimizer=muon orthogonalises whole matrices, which DeepSpeed and FSDP shard across processes; "
            "launch with DDP (or one process), or use trainer.optimizer=adamw"
        )
    hidden = [p for name, p in named if p.ndim == 2 and not any(key in name for key in _NOT_HIDDEN)]
    rest = [p for name, p in named if not (p.ndim == 2 and not any(key in name for key in _NOT_HIDDEN))]
    return MuonWithAdamW(hidden, rest, cfg.lr, cfg.weight_decay)
