"""Drafter architectures and their checkpoint formats. Imports nothing else of drafthub's."""

from heads.draft_lm import DraftLM

__all__ = ["DraftLM"]
