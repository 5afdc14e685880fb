"""vLLM serves a PARD export (`draft_model` + `parallel_drafting`) exactly as our engine drafts it."""

import pytest
import torch

from eval.measure_export import measure_export
from eval.proposers import load_proposer
from heads.config import PardConfig
from heads.families import read_export
from heads.pard import PardDrafter
from tests.eval.fitting import fit, sampled_text
from tests.exporting import export
from tests.serving.settings import SERVED
from train.setups.pard import PardDistillation

CFG = SERVED


@pytest.mark.needs_vllm
def test_vllm_serves_the_pard_export_as_our_engine_runs_it(tmp_path, target, tokenizer, micro_world, prompt_ids):
    torch.manual_seed(0)
    cfg = PardConfig(
        hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=2, max_draft_tokens=4
    )
    drafter = PardDrafter.from_config(cfg, target.config, tokenizer, pard_token=4)
    objective = PardDistillation(target, "fkl", 512, pard_token=4, max_draft_tokens=4, anchors_per_sequence=8)
    fit(drafter, objective, sampled_text(target), steps=80)
    out = export(drafter, tmp_path / "drafter", tokenizer=tokenizer)  # no "eagle"/"dflash" in the path (§1)
    proposer, kind = load_proposer(exported := read_export(out), target, len(tokenizer), CFG, "cpu")
    eos = {tokenizer.eos_token_id}
    names = {"kind": kind, "target": str(micro_world.target_dir)}
    report = measure_export(target, proposer, exported, prompt_ids, CFG, names, vocab_size=len(tokenizer), eos_ids=eos)
    served = report["served"]
    assert served["method"] == "draft_model" and served["equal_prompts"] == len(prompt_ids)
    assert served["verdict"] == "ok", served["reason"]
    assert served["tau"] > 1.1  # the briefly fitted drafter is accepted (1.16 here), not merely lossless
