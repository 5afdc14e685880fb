"""P-EAGLE drafters fitted for a few steps on the target's own text (test helpers)."""

from heads.config import PEagleConfig
from heads.peagle import PEagleDrafter
from heads.vocab import build_draft_vocab, pick_mask_token, token_counts
from tests.eval.eagle_fit import LAYER_IDS
from tests.eval.fitting import fit, sampled_text
from train.setups.peagle import PEagleParallelDrafting

MAX_DRAFT_TOKENS = 5  # K trained here; tests draft γ ≤ K


def fit_peagle(target, steps: int = 80, draft_vocab_size: int = 400, seed: int = 0) -> PEagleDrafter:
    batch = sampled_text(target, seed)
    V = target.config.vocab_size
    counts = token_counts(batch["input_ids"].tolist(), batch["loss_mask"].tolist(), V)
    vocab, _ = build_draft_vocab(counts, draft_vocab_size)
    mask = pick_mask_token(batch["input_ids"].tolist(), V, special_ids=[], exclude={0})
    cfg = PEagleConfig(layer_ids=LAYER_IDS, max_draft_tokens=MAX_DRAFT_TOKENS, anchors_per_sequence=8)
    drafter = PEagleDrafter.from_target(cfg, target, vocab, mask)
    objective = PEagleParallelDrafting(
        target, LAYER_IDS, vocab.draft_to_target, max_draft_tokens=MAX_DRAFT_TOKENS, anchors_per_sequence=8
    )
    return fit(drafter, objective, batch, steps)
