"""A user's first run on their own model and data: the checks that need no data run before distillation, eval
never measures training prompts, edited inputs are noticed, and expensive work is reused or refused — never
silently redone or silently continued. Each bad case through the real CLI: exit 2, one `error:` line, nothing
left behind (the contract of tests/test_bad_inputs.py)."""

from __future__ import annotations

import json

import pytest

from tests.cli_runs import run_app
from tests.test_bad_inputs import _app

TINY = ["data.max_prompts=8", "data.holdout=4", "data.sampling.max_new_tokens=8", "data.shard_size=8"]
FEW_STEPS = [  # train and eval just enough to run every stage
    "trainer.max_steps=2",
    "trainer.batch_size=4",
    "eval.num_prompts=2",
    "eval.warmup_prompts=0",
    "eval.max_new_tokens=8",
    "eval.gamma_sweep=[]",
    "publish.min_tau=1.0",
]
SMALL = ["recipe=toy", "target=micro", *TINY, *FEW_STEPS]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, standin):
    """A prompts file; a GPT-2 target (no intermediate_size); a target whose tokenizer outgrew its vocab_size."""
    root = tmp_path_factory.mktemp("first-run")
    rows = [{"messages": [{"role": "user", "content": f"def f{i}(x):"}]} for i in range(16)]
    (root / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    gpt2 = standin("gpt2").path
    import shutil

    grown = root / "grown-tokenizer"
    shutil.copytree(standin("llama3").path, grown)
    config = json.loads((grown / "config.json").read_text())
    (grown / "config.json").write_text(json.dumps(config | {"vocab_size": config["vocab_size"] - 8}))
    endless = root / "no-end-token"  # neither an eos token nor an eos_token_id anywhere
    shutil.copytree(standin("gpt2").path, endless)
    for name, key in (("tokenizer_config.json", "eos_token"), ("generation_config.json", "eos_token_id")):
        fields = json.loads((endless / name).read_text())
        (endless / name).write_text(json.dumps(fields | {key: None}))
    return {"root": root, "gpt2": gpt2, "grown": grown, "endless": endless, "llama3": standin("llama3").path}


CASES = [
    (
        "eval_split on a prompts file",
        ["stages=[distill,train,eval]", "data.prompts={root}/prompts.jsonl", "eval_split=test"],
        "eval_split=test: data.prompts={root}/prompts.jsonl is a file, which has no splits; set eval_prompts=FILE",
    ),
    (
        "no held-out prompts at all",
        ["stages=[distill,train,eval]", "data.prompts={root}/prompts.jsonl", "data.holdout=0"],
        "no held-out prompts to measure the drafter on: data.holdout=0",
    ),
    (
        "eval on the training split",
        ["stages=[distill,train,eval]", "eval_split=train"],
        "eval_split=train is data.split, the split the drafter is trained on",
    ),
    (
        "a held-out slice smaller than eval decodes",
        ["stages=[distill,train,eval]", "data.prompts={root}/prompts.jsonl", "data.holdout=2", "eval.num_prompts=4"],
        "data.holdout=2 held-out prompts are fewer than eval decodes",
    ),
    (
        "EAGLE-3 on a GPT-2 target",
        [
            "recipe=toy_eagle",
            "target.name_or_path={gpt2}",
            "drafter.layer_ids=[0,1,2]",
            "data.prompts={root}/prompts.jsonl",
        ],
        "has no intermediate_size, which the eagle3 drafter's MLP copies by default; set drafter.intermediate_size",
    ),
    (
        "a tokenizer with more tokens than vocab_size",
        ["target.name_or_path={grown}", "data.prompts={root}/prompts.jsonl"],
        "tokens but the model's vocab_size is",
    ),
    (
        "a target that names no end token",
        ["target.name_or_path={endless}", "target.chat_template='{{{{ messages[0].content }}}}'"],
        "names no end-of-sequence token (no eos_token in its tokenizer, no eos_token_id in generation_config.json)",
    ),
    (
        "a draft LM init with another vocabulary",
        ["target.name_or_path={llama3}", "data.prompts={root}/prompts.jsonl", "drafter.init={gpt2}"],
        "has another vocabulary than target",
    ),
]


@pytest.mark.parametrize("case,args,expected", CASES, ids=[c[0] for c in CASES])
def test_checks_that_need_no_data_run_before_distillation(case, args, expected, inputs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fill = dict(inputs)
    argv = ["recipe=toy", "target=micro", *TINY, *[a.format(**fill) for a in args], f"run_dir={tmp_path / 'run'}"]
    code, lines = _app("train", argv, None)
    assert code == 2, (case, lines)
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected.format(**fill) in lines[0], (case, lines)
    assert not (tmp_path / "run" / "data").exists(), case  # refused before distilling anything


def test_a_llama3_target_without_pad_token_distils_trains_and_measures_held_out_prompts(inputs, tmp_path, monkeypatch):
    """Llama-3.x ships no pad token: collate and generate pad with an end token; eval reads the held-out slice."""
    monkeypatch.chdir(tmp_path)
    argv = [
        *SMALL,
        f"target.name_or_path={inputs['llama3']}",
        f"data.prompts={inputs['root']}/prompts.jsonl",
        "stages=[distill,train,eval]",
        f"run_dir={tmp_path / 'run'}",
    ]
    code, out, err = run_app("train", argv)
    assert code == 0, err[-2000:]
    manifest = json.loads((tmp_path / "run" / "data" / "manifest.json").read_text())
    assert manifest["prompts"]["heldout"]["count"] == 4
    report = json.loads((tmp_path / "run" / "eval" / "eval_report.json").read_text())
    assert report["prompts"]["held_out_slice"] is True and report["prompts"]["overlap"] == 0
    from distill.stage.shards import load_distilled

    trained = set(load_distilled(tmp_path / "run" / "data")["prompt_index"])
    assert trained.isdisjoint(manifest["prompts"]["heldout"]["positions"])


def test_edited_prompts_are_noticed_and_a_trainer_change_reuses_the_dataset(inputs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    prompts = tmp_path / "mine.jsonl"
    prompts.write_text((inputs["root"] / "prompts.jsonl").read_text())
    base = [*SMALL, f"data.prompts={prompts}", "stages=[distill]"]
    code, out, err = run_app("train", [*base, f"run_dir={tmp_path / 'a'}"])
    assert code == 0 and "[distill] distilling: no finished dataset" in out, err[-2000:]
    # another run directory, same inputs: the dataset is adopted, not distilled again
    code, out, _ = run_app("train", [*base, "trainer.lr=0.001", f"run_dir={tmp_path / 'b'}"])
    assert code == 0 and f"[distill] reusing the dataset of {tmp_path / 'a' / 'data'}" in out
    # the same path with other contents: refused in the old run directory, naming what changed
    prompts.write_text(prompts.read_text().replace("def f1(", "def g1("))
    code, lines = _app("train", [*base, f"run_dir={tmp_path / 'a'}"], None)
    assert code == 2 and "was distilled from other inputs or settings (the prompt files' contents changed)" in lines[0]


def test_a_second_recipe_in_a_run_directory_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    run.joinpath(".hydra").mkdir(parents=True)
    run.joinpath(".hydra", "config.yaml").write_text("recipe_name: toy_medusa\ndrafter:\n  kind: medusa\n")
    code, lines = _app("train", ["recipe=toy", "target=micro", *TINY, "stages=[distill]", f"run_dir={run}"], None)
    assert code == 2 and len(lines) == 1
    assert f"run directory {run} holds a medusa run of recipe toy_medusa, not draft_lm of toy" in lines[0]
    assert not (run / "data").exists()


GPT2_TEMPLATE = (  # GPT-2 ships no chat template: a user brings one (target.chat_template)
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen2_5", "qwen3", "mistral", "gemma", "gpt2"])
def test_each_model_familys_quirks_run_distill_train_and_eval(family, standin, tmp_path, monkeypatch):
    """Several end ids (Qwen, Gemma), no bos (Qwen), a padded vocabulary (Qwen), no pad (Mistral, GPT-2), templates
    that refuse a system turn (Mistral, Gemma: those prompts are dropped and counted), no template (GPT-2)."""
    monkeypatch.chdir(tmp_path)
    rows = [{"messages": [{"role": "user", "content": f"def f{i}(x):"}]} for i in range(14)]
    rows[5:7] = [{"messages": [{"role": "system", "content": "Be brief."}, *r["messages"]]} for r in rows[5:7]]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = [
        *SMALL,
        f"target.name_or_path={standin(family).path}",
        f"data.prompts={tmp_path / 'p.jsonl'}",
        "stages=[distill,train,eval]",
        f"run_dir={tmp_path / 'run'}",
    ]
    if family == "gpt2":
        argv.append(f"target.chat_template={json.dumps(GPT2_TEMPLATE)}")
    code, out, err = run_app("train", argv)
    assert code == 0, err[-2000:]
    manifest = json.loads((tmp_path / "run" / "data" / "manifest.json").read_text())
    refused = sum(n for why, n in manifest["prompts"]["dropped"].items() if "chat template" in why)
    assert manifest["counts"]["samples"] == 8 and refused == (2 if family in ("mistral", "gemma") else 0)
    report = json.loads((tmp_path / "run" / "eval" / "eval_report.json").read_text())
    assert report["lossless"] is True and report["prompts"]["overlap"] == 0


def _hub_cache(root, repo: str, source, commit: str) -> None:
    """`source` laid out as the Hugging Face cache holds a downloaded `repo` at `commit` (refs/main → snapshot)."""
    import shutil

    folder = root / f"models--{repo.replace('/', '--')}"
    shutil.copytree(source, folder / "snapshots" / commit, ignore=shutil.ignore_patterns("standin.json"))
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(commit)


@pytest.mark.slow
def test_a_target_loaded_by_hub_name_is_pinned_to_the_commit_it_was_distilled_from(standin, tmp_path):
    """Loading by name, as users do, from the HF cache (offline here); when the Hub repo moves on, the old dataset
    is not silently reused: the rerun names the commit to pin."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    repo, cache = "meta-llama/Llama-3.1-8B-Instruct", tmp_path / "hf-cache"
    _hub_cache(cache, repo, standin("llama3").path, "a" * 40)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "".join(json.dumps({"messages": [{"role": "user", "content": f"q{i}"}]}) + "\n" for i in range(12))
    )
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    cmd = [
        sys.executable,
        "-m",
        "train",
        "target=hf",
        f"target.name_or_path={repo}",
        "target.dtype=float32",
        f"data.prompts={prompts}",
        "data.mix=[]",  # the default recipe also mixes in stdlib code stubs: these 12 prompts alone
        *TINY,
        "stages=[distill]",
        f"run_dir={tmp_path / 'run'}",
    ]
    first = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    manifest = json.loads((tmp_path / "run" / "data" / "manifest.json").read_text())
    assert manifest["target_commit"] == "a" * 40 and manifest["counts"]["samples"] == 8
    _hub_cache(cache, repo, standin("llama3").path, "b" * 40)  # the repo moved on; the cache follows main
    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 2
    assert again.stderr.strip().splitlines()[-1] == (
        f"error: {tmp_path / 'run' / 'data'} was distilled from {repo} at commit {'a' * 40}, which now resolves to "
        f"{'b' * 40}; set target.revision={'a' * 40} to reuse it, or give this run its own run_dir=PATH"
    )
