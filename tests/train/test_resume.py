import pytest
import torch

from distill.config import DataConfig, SamplingConfig, TargetConfig
from distill.stage.run import distill
from distill.stage.shards import load_distilled
from heads.config import DraftLMConfig, MedusaConfig
from heads.draft_lm import DraftLM
from heads.medusa import MedusaHeads
from tests.train.loop_runs import run_loop
from train.config import TrainerConfig
from train.setups.draft_lm import DraftLMDistillation
from train.setups.medusa import MedusaDistillation


def _drafter(target, tokenizer, kind="draft_lm"):
    torch.manual_seed(0)
    if kind == "medusa":
        return MedusaHeads.from_target(MedusaConfig(num_heads=2), target)
    return DraftLM.from_config(
        DraftLMConfig(hidden_size=32, intermediate_size=64, num_attention_heads=1, num_key_value_heads=1),
        target.config,
        tokenizer,
    )


def _train(tmp, dataset, target, tokenizer, *, stop_after=None, resume=True, kind="draft_lm", optimizer="adamw"):
    cfg = TrainerConfig(
        max_steps=6, batch_size=4, grad_accum=2, save_every=3, warmup_steps=2, lr=1e-2, resume=resume, log_every=1,
        optimizer=optimizer,
    )  # fmt: skip
    drafter = _drafter(target, tokenizer, kind)
    objective = (
        MedusaDistillation(target, 2, "ce", len(tokenizer))
        if kind == "medusa"
        else DraftLMDistillation(target, "fkl", len(tokenizer))
    )
    return run_loop(tmp, cfg, drafter, objective, dataset, tokenizer.pad_token_id, stop_after=stop_after)


@pytest.mark.parametrize("kind,optimizer", [("draft_lm", "adamw"), ("medusa", "adamw"), ("draft_lm", "muon")])
def test_resumed_training_ends_with_the_same_weights(tmp_path, micro_world, target, tokenizer, kind, optimizer):
    data = DataConfig(max_prompts=16, batch_size=8, shard_size=16, sampling=SamplingConfig(max_new_tokens=16))
    distill(TargetConfig(name_or_path="toyworld:micro"), data, tmp_path / "data", "cpu")
    dataset = load_distilled(tmp_path / "data")

    run = dict(kind=kind, optimizer=optimizer)
    straight, _, metrics = _train(tmp_path / "a", dataset, target, tokenizer, **run)
    # killed after step 4; last checkpoint: step 3 (with Muon: its momentum and AdamW's moments saved as one state)
    _train(tmp_path / "b", dataset, target, tokenizer, stop_after=4, **run)
    resumed, _, resumed_metrics = _train(tmp_path / "b", dataset, target, tokenizer, **run)
    assert resumed_metrics["loss"] == pytest.approx(metrics["loss"], rel=1e-6)
    # Killed after the last checkpoint, before the summary: the rerun reports the logged figures, not NaN.
    _, _, again = _train(tmp_path / "b", dataset, target, tokenizer, **run)
    assert again == resumed_metrics
    assert straight.keys() == resumed.keys()
    for k in straight:
        torch.testing.assert_close(straight[k], resumed[k], rtol=0, atol=0, msg=k)
    # And training did change the weights (the comparison is not vacuous).
    fresh = _drafter(target, tokenizer, kind).state_dict()
    assert any(not torch.equal(straight[k], fresh[k]) for k in straight)
