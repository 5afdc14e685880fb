"""One prompt reader: the eval app and the pipeline's eval stage template the same file alike."""

import json

import pytest
import torch
from omegaconf import OmegaConf

from eval.errors import EvalError
from eval.prompts import prompt_messages, read_prompt_ids
from heads.config import DraftLMConfig
from train.config import RunConfig
from train.eval_stage import eval_prompt_ids
from train.run_dir import RunPaths
from train.stage import Run

CONVERSATIONS = [
    [{"role": "user", "content": "x = 1\n"}, {"role": "assistant", "content": "y = 2\n"}],
    [
        {"role": "user", "content": "def f():\n"},
        {"role": "assistant", "content": "    pass\n"},
        {"role": "user", "content": "class A:\n"},
    ],
    [{"role": "user", "content": "import os\n"}],
]


def test_the_prompt_is_the_conversation_without_its_trailing_answers():
    u1, a1, u2 = CONVERSATIONS[1]
    assert prompt_messages([u1, a1, u2]) == [u1, a1, u2]  # the target answers the last user turn
    assert prompt_messages([u1, a1, u2, a1]) == [u1, a1, u2]
    assert prompt_messages([u1, a1]) == [u1]


def test_eval_app_and_pipeline_template_the_same_file_alike(tmp_path, micro_world, tokenizer):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"messages": c}) + "\n" for c in CONVERSATIONS))
    app = read_prompt_ids(path, tokenizer, limit=10)
    cfg = OmegaConf.to_object(
        OmegaConf.merge(
            OmegaConf.structured(RunConfig(drafter=DraftLMConfig())),
            {"target": {"name_or_path": str(micro_world.target_dir)}, "eval_prompts": str(path)},
        )
    )
    cfg.eval.num_prompts, cfg.eval.warmup_prompts = 10, 0
    run = Run(cfg, {}, RunPaths(tmp_path / "run"), torch.device("cpu"), "h", {})
    assert eval_prompt_ids(run, tokenizer, max_len=10_000) == app
    assert len(app) == 3 and tokenizer.decode(app[1]).endswith("class A:\n<|end|><|assistant|>")


def test_a_malformed_line_is_one_clear_error(tmp_path, tokenizer):
    path = tmp_path / "p.jsonl"
    path.write_text('{"messages": []}\n{"oops": 1}\n')
    with pytest.raises(EvalError, match=r"p.jsonl:2: expected a JSON object with a 'messages' list"):
        read_prompt_ids(path, tokenizer, limit=5)


def test_distillation_and_eval_cut_prompts_by_the_same_rule():
    from distill.chat import prompt_messages as distill_prompt

    u1, a1, u2 = CONVERSATIONS[1]
    for conversation in ([u1], [u1, a1], [u1, a1, u2], [u1, a1, u2, a1], [u1, a1, a1]):
        assert distill_prompt(conversation) == prompt_messages(conversation)
