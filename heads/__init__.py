"""Drafter architectures and their checkpoint formats. Imports nothing else of drafthub's."""

from heads.draft_lm import DraftLM
from heads.medusa import MedusaHeads

__all__ = ["DraftLM", "MedusaHeads"]
