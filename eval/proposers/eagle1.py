"""EAGLE-1 drafts through EAGLE-3's proposer: the same decode contract (a feature-conditioned layer rolled
forward one token at a time, chains or EAGLE-2 trees); only the features it reads differ, which the drafter
itself declares."""

from eval.proposers import eagle3

ENTRY = eagle3.ENTRY
