"""scripts/bench_answer_source.py (goal P4): the same prompts answered by the target and by the dataset itself, each
trained at equal steps and measured on held-out prompts; the dataset's run trains on exactly its own answers."""

from __future__ import annotations

import json

from eval import machine
from tests.cli_runs import run_app
from tests.conftest import import_script

ROWS = [{"prompt": f"def f{i}(x):\n", "completion": f"    return x + {i}\n"} for i in range(8)]
TINY = [
    "--override=target=micro",
    "--override=trainer.batch_size=4",
    "--override=data.sampling.max_new_tokens=8",
    "--override=eval.max_new_tokens=8",
    "--override=eval.warmup_prompts=0",
    "--override=eval.gamma_sweep=[]",
]


def test_the_target_and_the_dataset_answer_the_same_prompts_at_equal_steps(tmp_path, micro_world):
    bench = import_script("bench_answer_source")
    from distill.stage.shards import load_distilled

    prompts, held_out = tmp_path / "answered.jsonl", tmp_path / "held_out.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    held_out.write_text("".join(json.dumps({"prompt": f"def g{i}(y):\n"}) + "\n" for i in range(2)))
    argv = ["--out", str(tmp_path / "out"), "--recipe=toy", f"--prompts={prompts}", "--max-prompts=8"]
    argv += [f"--eval-prompts={held_out}", "--num-prompts=2", "--steps=2", *TINY]
    line = bench.main(argv, launch=lambda args, log: run_app("train", args)[0])
    target, dataset = (tmp_path / "out" / name for name in ("target", "dataset"))
    kept = load_distilled(dataset / "data")
    assert [r["finish_reason"] for r in kept] == ["dataset"] * 8
    answered = load_distilled(target / "data")
    assert all(r["finish_reason"] != "dataset" for r in answered)
    for run, source in ((target, "the target's answers"), (dataset, "the dataset's own answers")):
        data = json.loads((run / "checkpoints" / "final" / "train_summary.json").read_text())["training_data"]
        assert data["source"] == source and data["optimizer_steps"] == 2  # equal steps, said on the card
        prompts = json.loads((run / "eval" / "eval_report.json").read_text())["prompts"]
        assert prompts["source"] == str(held_out) and prompts["count"] == 2 and prompts["overlap"] == 0
    runs = line["runs"]
    assert line["target_vs_dataset_tau"] == round(runs["target"]["tau"] / runs["dataset"]["tau"], 3)
    assert line["met"] == (line["target_vs_dataset_tau"] >= 1.2) and runs["dataset"]["samples"] == 8
    assert line["machine"]["speed"] > 0 and line["machine"]["reference"]["name"] == machine.REFERENCE.name
