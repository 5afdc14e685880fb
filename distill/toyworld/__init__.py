"""The embedded toy world: a stdlib-Python corpus, a BPE tokenizer with a chat template, a small
LLaMA target trained on CPU and held-out chat prompts, all in HF format so that the pipeline
runs the same `from_pretrained` code real targets use.

    from distill.toyworld import load_world
    world = load_world("micro")          # built once, then cached
    world.target_dir, world.prompts_file("heldout")
"""

from distill.toyworld.build import ToyWorld, cache_root, load_world
from distill.toyworld.config import SIZES, WorldConfig

__all__ = ["SIZES", "ToyWorld", "WorldConfig", "cache_root", "load_world"]
