"""`speculators train` where no accelerator is: python -m train.peers.speculators_cpu <its flags>.

speculators 0.9.0 puts its model and batches on device index 0 (`trainer.get_local_rank`, `.to(0)`) and times its
logged steps with `torch.accelerator.synchronize()`; both need an accelerator. Without one, the rank it moves to is
"cpu" and the synchronisation a no-op (CPU work is synchronous); with one, nothing is patched. Everything else is its
own code, flags as its CLI takes them (`speculators train --help`)."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    import torch

    if not torch.accelerator.is_available():
        import speculators.train.trainer as trainer

        trainer.get_local_rank = lambda: "cpu"
        torch.accelerator.synchronize = lambda *args, **kwargs: None
    from speculators.train.cli import main as train
    from speculators.train.config import TrainConfig

    train(TrainConfig.resolve(argv))


if __name__ == "__main__":
    main(sys.argv[1:])
