"""eval.serve=vllm in the pipeline: the eval stage exports once and serves that directory; publish ships
those exact bytes."""

import json
import subprocess

import pytest

from heads.formats.fingerprint import served_files_hash
from tests.test_cli import SMALL, run


@pytest.mark.needs_vllm
@pytest.mark.slow
def test_pipeline_serves_the_export_it_then_publishes(tmp_path, micro_world):
    load = ["eval.serve_load=[1,2]", "eval.vllm.load_requests=4", "eval.vllm.load_repeats=1"]  # under load too
    r = run("train", "recipe=toy", *SMALL, "trainer.max_steps=30", "eval.serve=vllm", *load, f"run_dir={tmp_path}/run")
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "run"
    report = json.loads((run_dir / "eval" / "eval_report.json").read_text())
    served = report["served"]
    assert served["method"] == "draft_model" and served["verdict"] == "ok", served
    assert served["equal_prompts"] == served["num_prompts"] == 4
    assert served["files_sha256"] == served_files_hash(run_dir / "drafter")  # published == served, byte for byte
    # The served speed-up: vLLM with the drafter vs vLLM without it, on the same prompts, one at a time.
    tps = served["tokens_per_second"]
    assert served["speedup"] == pytest.approx(tps["speculative"] / tps["no_speculation"])
    spread = served["speedup_spread"]
    assert len(spread["per_prompt"]) == 4 and served["speed_repeats"] == 2
    assert spread["low"] <= served["speedup"] <= spread["high"]  # every interval holds its point
    assert set(served["timing"]) >= {"noisy", "baseline_drift", "device_name"}
    assert served["ours"]["speedup"] == report["speedup"]
    assert "## Served check: vLLM" in (run_dir / "eval" / "report.md").read_text()
    assert "speed-up vs no speculation" in (run_dir / "eval" / "report.md").read_text()
    card = (run_dir / "drafter" / "README.md").read_text()
    assert "Served check: vLLM" in card and "**ok**" in card
    gamma = served["num_speculative_tokens"]  # one γ: measured, served, and the one every snippet names
    assert gamma == report["settings"]["num_speculative_tokens"]
    assert f'"num_speculative_tokens": {gamma}}}' in card and f"num_assistant_tokens={gamma}," in card
    low, high = spread["low"], spread["high"]
    assert f"Served speed-up over vLLM without speculation: {served['speedup']:.2f}× ({low:.2f}–{high:.2f}×)" in card
    leftovers = [p.name for p in run_dir.iterdir() if p.name.startswith(".") and p.name != ".hydra"]
    assert not leftovers  # no staging directory or temporary provenance file left behind
    assert (
        json.loads((run_dir / "published.json").read_text())["stage_hash"]
        == json.loads((run_dir / "drafter" / "drafthub.json").read_text())["stage_hash"]
    )
    _served_under_load(report, run_dir)


def _served_under_load(report: dict, run_dir) -> None:
    """`vllm serve` with and without the drafter, driven by `vllm bench serve`: the figures, where they are shown,
    and no server left running."""
    load = report["serving_load"]
    assert load["server"] == "vllm serve (started by drafthub)" and load["concurrency"] == [1, 2]
    assert load["speculative_config"]["method"] == "draft_model"
    for level in load["levels"]:
        with_, without = level["speculative"], level["no_speculation"]
        assert with_["requests"] == without["requests"] == 4
        assert with_["output_tokens"] == without["output_tokens"]  # greedy and lossless: the same answers
        assert (
            level["served_tau"] > 1 and len(level["served_per_position_acceptance"]) == load["num_speculative_tokens"]
        )
        interval, tpot = level["throughput_speedup_interval"], level["tpot_speedup_interval"]
        assert interval["low"] <= level["throughput_speedup"] <= interval["high"]  # every interval holds its point
        assert tpot["low"] <= level["tpot_speedup"] <= tpot["high"]
        # a started server is sized for the highest level, so none is capped; its gauge, polled, never exceeds it
        assert level["capped_at"] is None, level["peak_running"]
        assert all(p is None or p <= level["concurrency"] for p in level["peak_running"].values())
        assert level["pays"] == (level["throughput_speedup"] > 1 and level["tpot_speedup"] > 1)
    assert load["break_even"]["verdict"]
    assert "## Serving under load" in (run_dir / "eval" / "report.md").read_text()
    card = (run_dir / "drafter" / "README.md").read_text()
    assert "## Serving under load" in card and f"**Break-even: {load['break_even']['verdict']}.**" in card
    plot = "serving_load.png"
    assert (run_dir / "drafter" / plot).read_bytes() == (run_dir / "eval" / plot).read_bytes()
    profile = json.loads((run_dir / "drafter" / "speculation_profile.json").read_text())
    assert profile == report["speculation_profile"] and set(profile["served_by_concurrency"]) == {"1", "2"}
    left = subprocess.run(["pgrep", "-f", "vllm.entrypoints.openai.api_server"], capture_output=True, text=True)
    assert not left.stdout.strip(), "a vllm serve process outlived the run"


@pytest.mark.needs_vllm
@pytest.mark.slow
def test_training_free_ngram_runs_eval_serve_and_publish_from_its_settings(tmp_path, micro_world):
    small = [
        "target=micro",
        "eval.num_prompts=4",
        "eval.max_new_tokens=24",
        "eval.gamma_sweep=[1,2]",
        "eval.vllm.speed_repeats=0",
        "publish.min_tau=1.0",  # n-gram lookup on 4 micro prompts: τ ≈ 1.09, under the default bar of 1.1
    ]
    r = run("train", "recipe=toy_ngram", *small, "eval.serve=vllm", f"run_dir={tmp_path}/run")
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "run"
    assert "[train] skipped: ngram is training-free" not in r.stdout  # toy_ngram's stages are [eval, publish]
    assert not (run_dir / "checkpoints").exists() and not (run_dir / "data").exists()  # nothing distilled or trained
    report = json.loads((run_dir / "eval" / "eval_report.json").read_text())
    assert report["kind"] == "ngram" and report["lossless"] is True and report["lossless_prompts"] == 4
    assert {"tau", "alpha", "speedup"} <= report.keys() and report["checkpoint_sha256"] is None
    served = report["served"]
    assert served["method"] == "ngram" and served["verdict"] == "ok", served
    assert served["files_sha256"] == served_files_hash(run_dir / "drafter") == report["export_sha256"]
    config = json.loads((run_dir / "drafter" / "config.json").read_text())
    assert config == {
        "drafthub_kind": "ngram",
        "method": "ngram",
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 5,
        "num_matches": 1,
    }
    assert json.loads((run_dir / "drafter" / "drafthub.json").read_text())["kind"] == "ngram"
    assert '"method": "ngram"' in (run_dir / "drafter" / "README.md").read_text()


def test_serving_without_vllm_fails_before_any_stage(tmp_path, monkeypatch):
    import importlib.util

    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from train.config import register_configs
    from train.pipeline import PipelineError, run_pipeline

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="conf", version_base=None):
        cfg = compose("config", overrides=["recipe=toy", "target=micro", "eval.serve=vllm", f"run_dir={tmp_path}/run"])
    GlobalHydra.instance().clear()
    with pytest.raises(
        PipelineError,
        match=r"eval.serve=vllm: vLLM is not installed; pip install 'drafthub\[vllm\]' .* or set eval.serve=null",
    ):
        run_pipeline(cfg)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("recipe, kind", [("toy_lookahead", "lookahead"), ("toy_suffix", "suffix")])
def test_training_free_lookahead_and_suffix_evaluate_and_publish_from_their_settings(
    tmp_path, micro_world, recipe, kind
):
    small = ["target=micro", "eval.num_prompts=3", "eval.max_new_tokens=16", "eval.gamma_sweep=[]"]
    r = run("train", f"recipe={recipe}", *small, f"run_dir={tmp_path}/run")
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "run"
    report = json.loads((run_dir / "eval" / "eval_report.json").read_text())
    assert report["kind"] == kind and report["lossless"] is True and report["draft_forwards_per_step"] == 0
    assert json.loads((run_dir / "drafter" / "config.json").read_text())["drafthub_kind"] == kind
    card = (run_dir / "drafter" / "README.md").read_text()
    assert "## Use it" in card
    assert ("no lookahead method" if kind == "lookahead" else '"method": "suffix"') in card
