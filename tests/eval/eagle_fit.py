"""EAGLE drafters fitted for a few steps on the target's own text (test helpers)."""

from heads.config import Eagle1Config, Eagle3Config
from heads.eagle import Eagle3Drafter
from heads.eagle1 import Eagle1Drafter
from heads.vocab import build_draft_vocab, token_counts
from tests.eval.fitting import fit, sampled_text
from train.setups.eagle1 import Eagle1Distillation
from train.setups.eagle3 import Eagle3TrainingTimeTest

LAYER_IDS = [0, 1, 2]  # the micro target has 2 layers: embeddings, entering layer 1, last output before the final norm


def fit_eagle(target, steps: int = 60, draft_vocab_size: int = 400, seed: int = 0) -> Eagle3Drafter:
    batch = sampled_text(target, seed)
    counts = token_counts(batch["input_ids"].tolist(), batch["loss_mask"].tolist(), target.config.vocab_size)
    vocab, _ = build_draft_vocab(counts, draft_vocab_size)
    drafter = Eagle3Drafter.from_target(Eagle3Config(layer_ids=LAYER_IDS), target, vocab)
    return fit(drafter, Eagle3TrainingTimeTest(target, LAYER_IDS, vocab.draft_to_target, ttt_steps=3), batch, steps)


def fit_eagle1(target, steps: int = 60, seed: int = 0) -> Eagle1Drafter:
    batch = sampled_text(target, seed)
    drafter = Eagle1Drafter.from_target(Eagle1Config(), target)
    return fit(drafter, Eagle1Distillation(target, target.config.vocab_size), batch, steps)
