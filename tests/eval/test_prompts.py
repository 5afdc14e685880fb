"""One prompt reader (distill.prompts.load_conversations): the eval app, the pipeline's eval stage and distillation
read and template the same file alike."""

import json

import torch
from omegaconf import OmegaConf

from distill import chat
from distill.prompts import load_conversations
from eval.prompts import prompt_ids, prompt_messages
from heads.config import DraftLMConfig
from tests.cli_runs import run_app
from train.config import RunConfig
from train.stages.eval import eval_prompt_ids
from train.stages.run import Run
from train.stages.run_dir import RunPaths

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
    app = prompt_ids(load_conversations(str(path), None, prompts_key="prompts", split_key="split"), tokenizer, limit=10)
    cfg = OmegaConf.to_object(
        OmegaConf.merge(
            OmegaConf.structured(RunConfig(drafter=DraftLMConfig())),
            {"target": {"name_or_path": str(micro_world.target_dir)}, "eval_prompts": str(path)},
        )
    )
    cfg.eval.num_prompts, cfg.eval.warmup_prompts = 10, 0
    run = Run(cfg, {}, RunPaths(tmp_path / "run"), torch.device("cpu"), "h", {})
    pipeline, _ = eval_prompt_ids(run, tokenizer, max_len=10_000)  # (ids, what they are)
    assert pipeline == app
    assert len(app) == 3 and tokenizer.decode(app[1]).endswith("class A:\n<|end|><|assistant|>")


def test_eval_reads_sharegpt_as_distillation_does_and_leaves_the_drafter_alone(
    tmp_path, micro_world, weak_draft, tokenizer
):
    """python -m eval on a ShareGPT JSON list: the prompts it measures are the ids distillation encodes, and a
    drafter directory without drafthub.json is only read (record=true writes into it)."""
    sharegpt = [
        {"id": str(i), "conversations": [{"from": "human", "value": c[0]["content"]}, {"from": "gpt", "value": "..."}]}
        for i, c in enumerate(CONVERSATIONS)
    ]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(sharegpt, indent=2))
    drafter = tmp_path / "elsewhere"
    weak_draft.save_pretrained(drafter)
    before = sorted(p.name for p in drafter.iterdir())
    args = [f"drafter_dir={drafter}", f"prompts={path}", f"target_path={micro_world.target_dir}", "eval.num_prompts=3"]
    code, out, err = run_app(
        "eval",
        [*args, f"out_dir={tmp_path / 'ev'}", "eval.warmup_prompts=0", "eval.max_new_tokens=4", "eval.gamma_sweep=[]"],
    )
    assert code == 0, err[-2000:]
    measured = [json.loads(line)["prompt_ids"] for line in (tmp_path / "ev" / "eval_samples.jsonl").open()]
    distilled = [chat.encode_prompt(tokenizer, chat.prompt_messages(c)) for c in load_conversations(str(path), "train")]
    assert measured == distilled and len(measured) == 3
    assert sorted(p.name for p in drafter.iterdir()) == before  # not written: it may be someone else's directory
    assert "run again with record=true" in out


def test_distillation_and_eval_cut_prompts_by_the_same_rule():
    from distill.chat import prompt_messages as distill_prompt

    u1, a1, u2 = CONVERSATIONS[1]
    for conversation in ([u1], [u1, a1], [u1, a1, u2], [u1, a1, u2, a1], [u1, a1, a1]):
        assert distill_prompt(conversation) == prompt_messages(conversation)
