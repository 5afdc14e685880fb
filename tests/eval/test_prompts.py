"""One prompt reader (distill.prompts.read.read_prompts): the eval app, the pipeline's eval stage and distillation
read and template the same file alike, `turns` rows turn by turn with the target's own answers."""

import json

import pytest
import torch
from omegaconf import OmegaConf

from distill.config import DataConfig, SamplingConfig, TargetConfig
from distill.prompts import chat
from distill.prompts.read import load_conversations, read_prompts
from distill.stage.run import distill
from distill.stage.shards import load_distilled
from eval.config import EvalConfig
from eval.errors import EvalError
from eval.prompts import answered, measured_prompts, pending_turn, prompt_ids, prompt_messages, target_answers
from eval.sampling import SamplingParams
from eval.speculative import autoregressive_generate
from heads.config import DraftLMConfig
from tests.cli_runs import run_app
from train.config import RunConfig
from train.errors import PipelineError
from train.eval_prompts import check_disjoint, training_overlap
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
    pipeline, _ = eval_prompt_ids(run, tokenizer, max_len=10_000)  # (prompts, what they are)
    assert pipeline.ids == app and pipeline.categories == [None] * 3
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
    from distill.prompts.chat import prompt_messages as distill_prompt

    u1, a1, u2 = CONVERSATIONS[1]
    for conversation in ([u1], [u1, a1], [u1, a1, u2], [u1, a1, u2, a1], [u1, a1, a1]):
        assert distill_prompt(conversation) == prompt_messages(conversation)


def test_distillation_and_eval_encode_raw_text_alike_and_a_chat_row_needs_a_template(tokenizer):
    """A completion prompt is its own ids in both (the tokenizer's start token first), never templated; eval names
    a chat row a template-less target cannot take, and both ways out."""
    from copy import deepcopy

    from distill.prompts.chat import TEXT, encode_prompt
    from eval.prompts import TEXT as EVAL_TEXT

    assert EVAL_TEXT == TEXT
    text = [[{"role": TEXT, "content": "def add(a, b):\n"}]]
    measured = measured_prompts(text, tokenizer, limit=1).ids
    assert measured == [encode_prompt(tokenizer, text[0])] == [tokenizer("def add(a, b):\n")["input_ids"]]
    bare = deepcopy(tokenizer)
    bare.chat_template = None
    assert measured_prompts(text, bare, limit=1).ids == measured
    with pytest.raises(EvalError, match=r"eval prompt 2 is a chat conversation, and the target has no chat template"):
        measured_prompts([*text, [CONVERSATIONS[1][0]]], bare, limit=2)


SPEC_BENCH = [  # Spec-Bench's question.jsonl layout: MT-Bench's turns, a category per row
    {"question_id": 1, "category": "writing", "turns": ["def add(a, b):\n", "import os\n"]},
    {"question_id": 2, "category": "qa", "turns": ["class A:\n"]},
    {"question_id": 3, "category": "writing", "turns": ["x = 1\n", "y = 2\n"]},
]


def _spec_bench(path) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in SPEC_BENCH))
    return str(path)


def _contains(ids: list[int], part: list[int]) -> bool:
    return any(ids[i : i + len(part)] == part for i in range(len(ids) - len(part) + 1))


def test_a_turns_row_is_measured_turn_by_turn_with_the_targets_own_answers(tmp_path, target, tokenizer):
    rows = read_prompts(_spec_bench(tmp_path / "question.jsonl"), None)
    cfg, eos = EvalConfig(max_new_tokens=12), {tokenizer.eos_token_id}
    answer = target_answers(target, cfg, eos_ids=eos, vocab_size=len(tokenizer))
    measured = measured_prompts(rows.conversations, tokenizer, limit=10, categories=rows.categories, answer=answer)
    assert len(measured.ids) == 5 and measured.categories == ["writing", "writing", "qa", "writing", "writing"]
    # turn 2's prompt holds the target's autoregressive answer to turn 1, token for token
    first = autoregressive_generate(
        target, [measured.ids[0]], 12, SamplingParams(), eos_ids=eos, vocab_size=len(tokenizer)
    )
    reply = [t for t in first[0] if t not in eos]
    assert reply and _contains(measured.ids[1], reply) and measured.ids[1][: len(measured.ids[0])] == measured.ids[0]
    assert tokenizer.decode(measured.ids[1]).endswith("<|end|><|user|>import os\n<|end|><|assistant|>")
    assert measured_prompts(rows.conversations, tokenizer, limit=2, answer=answer).ids == measured.ids[:2]
    with pytest.raises(EvalError, match=r"eval prompt 1 \(turn 1\) is a turn of a `turns` row: its next turn needs"):
        prompt_ids(rows.conversations, tokenizer, limit=10)  # no answer given: a caller's mistake, named
    with pytest.raises(EvalError, match=r"^eval prompt 1 \(turn 2\) has \d+ tokens; .*overlong_prompts=truncate$"):
        measured_prompts(rows.conversations, tokenizer, limit=10, answer=answer, max_len=len(measured.ids[0]))


def test_distillation_and_eval_answer_turns_alike_and_the_proof_catches_a_trained_turn(tmp_path, target, tokenizer):
    """Greedy distillation of a `turns` file gives a sample per turn, each prompt holding the target's answers:
    exactly the prompts eval measures on that file, so the held-out proof finds every one of them trained on."""
    path = _spec_bench(tmp_path / "question.jsonl")
    greedy = SamplingConfig(temperature=0, max_new_tokens=8)
    data = DataConfig(prompts=path, holdout=0, max_prompts=0, sampling=greedy)
    manifest = distill(TargetConfig(name_or_path="toyworld:micro"), data, tmp_path / "data", "cpu")
    dataset = load_distilled(tmp_path / "data")
    assert manifest["counts"]["samples"] == 5 and dataset["prompt_index"] == [0, 0, 1, 2, 2]
    second = dataset[1]["input_ids"][: dataset[1]["prompt_length"]]
    assert _contains(
        second, [t for t in dataset[0]["input_ids"][dataset[0]["prompt_length"] :] if t != tokenizer.eos_token_id]
    )
    cfg = EvalConfig(max_new_tokens=8)
    answer = target_answers(target, cfg, eos_ids={tokenizer.eos_token_id}, vocab_size=len(tokenizer))
    measured = measured_prompts(read_prompts(path, None).conversations, tokenizer, limit=10, answer=answer).ids
    assert measured == [row["input_ids"][: row["prompt_length"]] for row in dataset]
    report = {"prompts": training_overlap(measured, dataset)}
    assert report["prompts"]["overlap"] == 5
    with pytest.raises(PipelineError, match="5 of the measured prompts are in the distilled training data"):
        check_disjoint(report, [{"prompt_ids": ids} for ids in measured], dataset)


def test_eval_app_and_pipeline_measure_a_turns_file_alike(tmp_path, micro_world, target, tokenizer):
    path = _spec_bench(tmp_path / "question.jsonl")
    cfg = OmegaConf.to_object(
        OmegaConf.merge(
            OmegaConf.structured(RunConfig(drafter=DraftLMConfig())),
            {"target": {"name_or_path": str(micro_world.target_dir)}, "eval_prompts": path},
        )
    )
    cfg.eval.num_prompts, cfg.eval.warmup_prompts, cfg.eval.max_new_tokens = 4, 0, 6
    run = Run(cfg, {}, RunPaths(tmp_path / "run"), torch.device("cpu"), "h", {})
    answer = target_answers(target, cfg.eval, eos_ids={tokenizer.eos_token_id}, vocab_size=len(tokenizer))
    pipeline, what = eval_prompt_ids(run, tokenizer, 10_000, answer)
    rows = read_prompts(path, None, prompts_key="prompts", split_key="split")
    answer = target_answers(target, cfg.eval, eos_ids={tokenizer.eos_token_id}, vocab_size=len(tokenizer))
    app = measured_prompts(rows.conversations, tokenizer, limit=4, categories=rows.categories, answer=answer)
    assert pipeline == app and len(app.ids) == 4 and what["count"] == 4
    assert app.categories == ["writing", "writing", "qa", "writing"]


def test_python_m_eval_reads_a_named_column_of_turns_and_reports_per_category(tmp_path, micro_world, weak_draft):
    path = tmp_path / "bench.jsonl"
    path.write_text(
        "".join(
            json.dumps({"id": r["question_id"], "category": r["category"], "dialogue": r["turns"]}) + "\n"
            for r in SPEC_BENCH
        )
    )
    drafter = tmp_path / "drafter"
    weak_draft.save_pretrained(drafter)
    args = [
        f"drafter_dir={drafter}",
        f"prompts={path}",
        f"target_path={micro_world.target_dir}",
        f"out_dir={tmp_path / 'ev'}",
    ]
    settings = ["eval.num_prompts=5", "eval.warmup_prompts=0", "eval.max_new_tokens=6", "eval.gamma_sweep=[]"]
    code, _, err = run_app("eval", [*args, *settings])
    assert code == 2 and "bench.jsonl:1: no 'messages', 'conversations' (ShareGPT), 'turns', 'prompt' or 'text'" in err
    assert "or set prompts_column" in err
    code, _, err = run_app("eval", [*args, *settings, "prompts_column=dialogue"])
    assert code == 0, err[-2000:]
    report = json.loads((tmp_path / "ev" / "eval_report.json").read_text())
    assert report["settings"]["num_prompts"] == 5 and list(report["categories"]) == ["writing", "qa"]
    assert [c["prompts"] for c in report["categories"].values()] == [4, 1]
    assert "## Per category" in (tmp_path / "ev" / "report.md").read_text()


def test_distillation_and_eval_answer_owed_turns_by_the_same_rule():
    from distill.prompts.chat import answered as distill_answered
    from distill.prompts.chat import pending_turn as distill_pending

    u1, a1, u2 = CONVERSATIONS[1]
    owed = {"role": "assistant", "content": None}
    for conversation in ([u1], [u1, a1, u2], [u1, owed, u2], [u1, owed, u2, owed, u1]):
        assert distill_pending(conversation) == pending_turn(conversation)
        if pending_turn(conversation)[1]:
            assert distill_answered(conversation, "ok") == answered(conversation, "ok")


def test_repeated_requests_ask_every_block_again_right_after_itself(tokenizer):
    """eval.repeat_block: the same number of decodes, half of them repeats of the block before, categories kept."""
    conversations = [[{"role": "user", "content": f"question {i}"}] for i in range(8)]
    categories = [f"c{i}" for i in range(8)]
    once = measured_prompts(conversations, tokenizer, limit=8, categories=categories)
    twice = measured_prompts(conversations, tokenizer, limit=7, categories=categories, repeat_block=2)
    order = [0, 1, 0, 1, 2, 3, 2]
    assert twice.ids == [once.ids[i] for i in order] and twice.categories == [categories[i] for i in order]
    assert measured_prompts(conversations, tokenizer, limit=3, repeat_block=4).ids == once.ids[:3]
    with pytest.raises(EvalError, match=r"eval.repeat_block=-1; use 0 \(each prompt once\) or a block size"):
        from eval.run import check_settings

        check_settings(EvalConfig(repeat_block=-1))
