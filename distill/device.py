"""Where distill's models run by default: the GPU when there is one (a module of its own, so the toy world's
builder can use it without importing the target loader, which resolves toy-world aliases)."""

import torch


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
