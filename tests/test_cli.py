"""The entry points as a user runs them: clear one-line errors and non-zero exits, end to end."""

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests.cli_runs import run_app
from tests.conftest import REPO

SMALL = [  # the toy recipe's stages at micro sizes: callers name the recipe (recipe=toy, the old main job)
    "target=micro",
    "data.max_prompts=24",
    "data.sampling.max_new_tokens=24",
    "trainer.max_steps=6",
    "trainer.batch_size=8",
    "eval.num_prompts=4",
    "eval.max_new_tokens=24",
    "eval.gamma_sweep=[1,2]",
    "publish.min_tau=1.0",  # 6 steps on the micro world: these tests run the stages, the default bar refuses such τ
]


def run(name, *args):
    """`python -m name *args` as `python -m` runs it, in-process (tests/cli_runs.py: seconds of imports saved)."""
    code, out, err = run_app(name, list(args))
    return SimpleNamespace(returncode=code, stdout=out, stderr=err)


def run_process(*args, cwd=REPO):
    """`python -m *args` in a fresh interpreter: the module entry points themselves."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def test_misspelt_config_key_fails(tmp_path):
    r = run_process("train", "trainer.learning_rate=0.1", f"run_dir={tmp_path}/r")
    assert r.returncode != 0
    assert "learning_rate" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "r").exists()


def test_malformed_jsonl_is_one_clear_line(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"messages": [{"role": "user", "content": "x"}]}\n{"messages": [\n')
    r = run("distill", "target=micro", f"data.prompts={prompts}", f"out_dir={tmp_path}/out")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith(f"error: {prompts}:2: malformed JSON")
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.slow
def test_vocabulary_mismatch_is_one_clear_line(tmp_path, micro_world):
    from transformers import LlamaConfig, LlamaForCausalLM

    from distill.toyworld.tokenizer import train_tokenizer

    other = tmp_path / "other-draft"
    tok = train_tokenizer(["def f(x):\n    return x\n" * 50], vocab_size=300)
    LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=1
        )
    ).save_pretrained(other)
    tok.save_pretrained(other)
    r = run("train", "recipe=toy", *SMALL, "stages=[distill,train]", f"drafter.init={other}", f"run_dir={tmp_path}/run")
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1].startswith(f"error: drafter.init={other} has another vocabulary")
    assert not (tmp_path / "run" / "data").exists()  # refused before distilling: the check needs no data


@pytest.mark.slow
def test_train_runs_all_stages_then_reuses_them(tmp_path, micro_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_drafthubTestSecretNeverWritten")  # as a logged-in user has it
    r = run("train", "recipe=toy", *SMALL, f"run_dir={tmp_path}/run", f"publish.hub_dir={tmp_path}/hub")
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "run"
    report = json.loads((run_dir / "eval" / "eval_report.json").read_text())
    assert report["lossless"] is True and report["tau"] >= 1.0
    # the run ends on what the drafter achieved and where it is, not on a stage timing
    n = report["prompts"]["count"]
    assert f"[eval] τ {report['tau']:.2f}, α {report['alpha']:.2f}, speed-up {report['speedup']:.2f}×" in r.stdout
    assert f"(lossless on {n}/{n} prompts); drafter: {run_dir / 'drafter'}, report: {run_dir / 'eval'}" in r.stdout
    assert "[publish] done in" in r.stdout
    assert [line for line in r.stdout.splitlines() if line.startswith("[")][-1].startswith("[eval] τ ")
    assert [g["num_speculative_tokens"] for g in report["gamma_sweep"]] == [1, 2, 4]
    assert (
        report["recommended_num_speculative_tokens"]
        == max(report["gamma_sweep"], key=lambda g: g["speedup"])["num_speculative_tokens"]
    )
    for f in ("eval_samples.jsonl", "report.md", "acceptance.png", "gamma_sweep.png"):
        assert (run_dir / "eval" / f).exists()
    assert "](gamma_sweep.png)" in (run_dir / "eval" / "report.md").read_text()
    assert (run_dir / ".hydra" / "config.yaml").exists()
    prov = json.loads((run_dir / "drafter" / "drafthub.json").read_text())
    assert prov["target"]["name_or_path"] == "toyworld:micro" and prov["eval"]["tau"] == report["tau"]
    # The published directory passes the same gate push_to_hub applies, and went into the local hub.
    from train.registry.gate import check_publishable

    assert check_publishable(run_dir / "drafter")["export_sha256"] == prov["export_sha256"]
    index = json.loads((tmp_path / "hub" / "index.json").read_text())["drafters"]
    assert [(d["target"], d["version"], d["tau"]) for d in index] == [("toyworld:micro", 1, report["tau"])]
    secret = os.environ["HF_TOKEN"]
    for root in (run_dir, tmp_path / "hub"):
        for f in root.rglob("*"):
            assert not f.is_file() or secret.encode() not in f.read_bytes(), f  # the token is never written
    # The standalone eval app measures the exported drafter against the target it names.
    r = run(
        "eval",
        f"drafter_dir={run_dir}/drafter",
        f"prompts={micro_world.prompts_file('heldout')}",
        f"out_dir={tmp_path}/ev",
        "eval.num_prompts=3",
        "eval.max_new_tokens=16",
        "eval.tree=[2,1]",
        "eval.batch_size=2",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1])["lossless"] is True
    r = run(
        "eval",
        f"drafter_dir={run_dir}/drafter",
        f"prompts={micro_world.prompts_file('heldout')}",
        f"out_dir={tmp_path}/ev2",
        "eval.acceptance=tipical",
    )
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith(
        "error: eval.acceptance='tipical' is not a rule"
    )
    assert not (tmp_path / "ev2").exists()
    r = run(
        "eval",
        f"drafter_dir={run_dir}/drafter",
        f"prompts={micro_world.prompts_file('heldout')}",
        f"out_dir={tmp_path}/ev3",
        "eval.tree=drafter",
    )
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith(
        "error: eval.tree=drafter needs a drafter that saves its tree"
    )
    # Second run: every stage is found complete and skipped (fast, same report).
    mtime = (run_dir / "eval" / "eval_report.json").stat().st_mtime
    r = run("train", "recipe=toy", *SMALL, f"run_dir={tmp_path}/run", f"publish.hub_dir={tmp_path}/hub")
    assert r.returncode == 0
    assert (run_dir / "eval" / "eval_report.json").stat().st_mtime == mtime
    # The finished run, made read-only, is re-read in place: every stage skipped, nothing written.
    modes = {p: p.stat().st_mode for p in [run_dir, *run_dir.rglob("*")]}
    for p in modes:
        p.chmod(modes[p] & ~0o222)
    try:
        r = run("train", "recipe=toy", *SMALL, f"run_dir={tmp_path}/run", f"publish.hub_dir={tmp_path}/hub")
    finally:
        for p, mode in modes.items():
            p.chmod(mode)
    assert r.returncode == 0, r.stderr[-3000:]
    # A figure edited by hand in the run's report is refused at publish, and nothing is published.
    forged = json.loads((run_dir / "eval" / "eval_report.json").read_text()) | {"tau": 4.9}
    (run_dir / "eval" / "eval_report.json").write_text(json.dumps(forged))
    (run_dir / "published.json").unlink()
    r = run(
        "train", "recipe=toy", *SMALL, "stages=[publish]", f"run_dir={tmp_path}/run", f"publish.hub_dir={tmp_path}/hub"
    )
    assert r.returncode == 2 and "its eval figures are not the ones eval measured" in r.stderr.strip().splitlines()[-1]
    assert len(json.loads((tmp_path / "hub" / "index.json").read_text())["drafters"]) == 1


@pytest.mark.slow
def test_toy_medusa_recipe_end_to_end(tmp_path, micro_world):
    """Distil, train heads, calibrate the tree, evaluate losslessly, export in vLLM's Medusa format."""
    small = [s for s in SMALL if not s.startswith("eval.gamma_sweep")]
    r = run(
        "train",
        "recipe=toy_medusa",
        *small,
        "trainer.max_steps=10",
        "drafter.holdout_samples=8",
        "drafter.tree_nodes=10",
        f"run_dir={tmp_path}/run",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    drafter = tmp_path / "run" / "drafter"
    config = json.loads((drafter / "config.json").read_text())
    assert config["model_type"] == "medusa" and config["num_heads"] == 4
    tree = json.loads((drafter / "medusa_tree.json").read_text())
    assert len(tree["paths"]) == 10 and len(tree["head_accuracy"]) == 4
    report = json.loads((tmp_path / "run" / "eval" / "eval_report.json").read_text())
    assert report["kind"] == "medusa" and report["lossless"] is True
    assert [g["num_speculative_tokens"] for g in report["gamma_sweep"]] == [1, 2, 3, 4]  # capped at the head count
    prompts = micro_world.prompts_file("heldout")
    # The exported directory decodes with its own tree, losslessly, through the eval app.
    r = run(
        "eval",
        f"drafter_dir={drafter}",
        f"prompts={prompts}",
        f"out_dir={tmp_path}/ev",
        "eval.num_prompts=3",
        "eval.max_new_tokens=16",
        "eval.tree=drafter",
        "eval.batch_size=2",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1])["lossless"] is True
    assert json.loads((tmp_path / "ev" / "eval_report.json").read_text())["draft_tokens_per_step"] == 10
    r = run(
        "eval",
        f"drafter_dir={drafter}",
        f"prompts={prompts}",
        f"out_dir={tmp_path}/ev2",
        "eval.num_speculative_tokens=6",
    )
    assert r.returncode == 2 and "proposes at most 4 tokens per step; lower it" in r.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "ev2").exists()


def test_bad_medusa_settings_fail_before_any_stage(tmp_path):
    r = run("train", "recipe=toy_medusa", "drafter.tree_nodes=0", f"run_dir={tmp_path}/r")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == "error: drafter.tree_nodes=0 must be ≥ 1"
    r = run("train", "recipe=toy_medusa", "eval.num_speculative_tokens=6", f"run_dir={tmp_path}/r")
    assert r.returncode == 2 and "exceeds drafter.num_heads=4" in r.stderr
    r = run("train", "recipe=toy_eagle", "drafter.ttt_steps=0", f"run_dir={tmp_path}/r")
    assert r.returncode == 2 and "drafter.ttt_steps=0 must be ≥ 1" in r.stderr
    r = run("train", "eval.tree=3", f"run_dir={tmp_path}/r")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("error: eval.tree=3 must be null")
    assert not (tmp_path / "r").exists()


def test_eval_app_templates_prompts_as_the_drafter_was_trained(tmp_path, tokenizer):
    import copy

    from distill.errors import DistillError
    from eval.__main__ import EvalAppConfig, _chat_template

    template = "{{ messages[0]['content'] }} ->"
    (tmp_path / "drafthub.json").write_text(json.dumps({"recipe": {"target": {"chat_template": template}}}))
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = None  # a target that ships no template (Vicuna v1.3)
    _chat_template(EvalAppConfig(), tmp_path, tok)
    assert tok.chat_template == template
    tok.chat_template = None  # none anywhere: raw text is measured, a chat prompt is refused naming both ways out
    _chat_template(EvalAppConfig(), tmp_path / "elsewhere", tok)
    assert tok.chat_template is None
    (tmp_path / "chat.jinja").write_text(template)
    _chat_template(EvalAppConfig(chat_template=str(tmp_path / "chat.jinja")), tmp_path / "elsewhere", tok)
    assert tok.chat_template == template
    with pytest.raises(DistillError, match=r"none\.jinja: no such file"):
        _chat_template(EvalAppConfig(chat_template=str(tmp_path / "none.jinja")), tmp_path / "elsewhere", tok)


@pytest.mark.slow
def test_toy_eagle_recipe_end_to_end(tmp_path, micro_world):
    """Distil, build the draft vocabulary, write offline features, train with TTT, evaluate losslessly,
    export for vLLM and SGLang."""
    small = [s for s in SMALL if not s.startswith("eval.gamma_sweep")]
    r = run(
        "train",
        "recipe=toy_eagle",
        *small,
        "drafter.layer_ids=[0,1,2]",
        "drafter.draft_vocab_size=300",
        "drafter.features=offline",
        "drafter.select_samples=8",
        "trainer.max_steps=6",
        "trainer.save_every=3",
        "eval.gamma_sweep=[1,2]",
        f"run_dir={tmp_path}/run",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert (
        "offline features:" in r.stdout
        and len(list((tmp_path / "run" / "data" / "features").glob("*/manifest.json"))) == 1
    )
    summary = json.loads((tmp_path / "run" / "checkpoints" / "final" / "train_summary.json").read_text())
    assert summary["selected_checkpoint"]["step"] in (3, 6)  # scored by simulated τ on 8 held-out samples
    drafter = tmp_path / "run" / "drafter"
    config = json.loads((drafter / "config.json").read_text())
    assert (
        config["speculators_model_type"] == "eagle3"
        and config["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]
        and config["draft_vocab_size"] == 300
    )
    assert (drafter / "sglang" / "model.safetensors").exists()
    # The verifier it names loads as it is (the toy world's directory, not the toyworld: alias).
    from transformers import AutoConfig

    verifier = config["speculators_config"]["verifier"]["name_or_path"]
    assert AutoConfig.from_pretrained(verifier).hidden_size == config["target_hidden_size"]
    prov = json.loads((drafter / "drafthub.json").read_text())
    assert 0 < prov["draft_vocab"]["coverage"] <= 1
    report = json.loads((tmp_path / "run" / "eval" / "eval_report.json").read_text())
    assert report["kind"] == "eagle3" and report["lossless"] is True
    r = run(
        "eval",
        f"drafter_dir={drafter}",
        f"prompts={micro_world.prompts_file('heldout')}",
        f"out_dir={tmp_path}/ev",
        "eval.num_prompts=3",
        "eval.max_new_tokens=16",
        "eval.tree=dynamic",
        "eval.batch_size=2",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1])["lossless"] is True
    r = run(
        "eval",
        f"drafter_dir={drafter}",
        f"prompts={micro_world.prompts_file('heldout')}",
        f"out_dir={tmp_path}/ev2",
        "eval.tree=drafter",
    )
    assert r.returncode == 2 and "is not an EAGLE tree" in r.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_eagle1_trains_from_offline_features(tmp_path, micro_world):
    r = run(
        "train",
        "recipe=toy_eagle1",
        "drafter.features=offline",
        *SMALL,
        "stages=[distill,train]",
        f"run_dir={tmp_path}/run",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert (
        json.loads((tmp_path / "run" / "checkpoints" / "final" / "config.json").read_text())["drafthub_kind"]
        == "eagle1"
    )
    manifest = json.loads(next((tmp_path / "run" / "data" / "features").glob("*/manifest.json")).read_text())
    assert (
        manifest["layer_ids"] == [] and manifest["bytes_per_token"] == 2 * 64
    )  # the micro target's lm_head input, bf16


def test_an_unknown_drafter_kind_stops_before_any_stage(tmp_path):
    r = run("train", "recipe=toy", "target=micro", "drafter.kind=nope", f"run_dir={tmp_path}/run")
    assert r.returncode == 2
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: drafter.kind='nope' has no entry in the family table") and "'ngram'" in last
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_training_free_ngram_skips_the_train_stage(tmp_path, micro_world):
    small = ["target=micro", "eval.num_prompts=4", "eval.max_new_tokens=24", "eval.gamma_sweep=[1,2]"]
    small.append("publish.min_tau=1.0")  # n-gram lookup on 4 micro prompts: τ ≈ 1.09, under the default bar
    r = run("train", "recipe=toy_ngram", *small, "stages=[train,eval,publish]", f"run_dir={tmp_path}/run")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "[train] skipped: ngram is training-free" in r.stdout
    report = json.loads((tmp_path / "run" / "eval" / "eval_report.json").read_text())
    assert report["kind"] == "ngram" and report["lossless"] is True and report["tau"] >= 1.0
    assert not (tmp_path / "run" / "checkpoints").exists()  # no fake checkpoint
    # The export is the settings; the eval app measures it like any other drafter directory.
    r = run(
        "eval",
        f"drafter_dir={tmp_path}/run/drafter",
        f"prompts={micro_world.prompts_file('heldout')}",
        f"out_dir={tmp_path}/ev",
        "eval.num_prompts=3",
        "eval.max_new_tokens=16",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1])["lossless"] is True


def test_a_launched_peer_leaves_the_run_directory_to_the_main_process(tmp_path, monkeypatch):
    """The main process removes what killed writes left (temporary files) before any stage; a peer that wrote the
    resolved config meanwhile had its temporary file removed under it ('cannot use …/.hydra/.config.yaml.….tmp',
    seen in a 2-process launch on a busy machine). Peers hold the same config and write none of it."""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    r = run("train", "recipe=toy", "target=micro", "stages=[]", f"run_dir={tmp_path}/run")
    assert r.returncode == 0, r.stderr[-2000:]
    assert not (tmp_path / "run").exists()
