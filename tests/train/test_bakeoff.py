"""Drafter bake-off: six families on one dataset and one evaluation, one recommendation."""

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from heads.families import CATEGORIES
from train.bakeoff.render import render_markdown
from train.bakeoff.run import run_bakeoff
from train.bakeoff.verdicts import free_vs_trained, recommend
from train.config import register_configs
from train.registry.local_hub import read_index


def _row(recipe, speedup, tau, lossless=True, verdict=None, trained=True):
    return {
        "trained": trained,
        "recipe": recipe,
        "kind": "draft_lm",
        "speedup": speedup,
        "tau": tau,
        "alpha": 0.5,
        "cost_ratio": 0.1,
        "draft_forwards_per_step": 4.0,
        "lossless": lossless,
        "parameters": 1e6,
        "train_seconds": 60.0,
        "served_tau": tau if verdict else None,
        "served_verdict": verdict,
    }


def test_recommendation_is_the_fastest_trustworthy_drafter():
    rows = [
        _row("a", 1.5, 2.5, lossless=False),
        _row("b", 1.4, 2.9, verdict="broken"),
        _row("c", 1.3, 2.6, verdict="ok"),
        _row("d", 1.3, 2.7, verdict="ok"),
    ]
    assert recommend(rows)["recipe"] == "d"  # a is lossy, b failed its served check, d ties c on speed with higher τ
    assert recommend(rows[:2]) is None
    # a speed-up 1% higher is noise on a shared CPU: within the tie band the higher τ wins
    close = [_row("medusa", 1.340, 2.39), _row("draft", 1.339, 2.78), _row("eagle", 1.128, 2.90)]
    assert recommend(close)["recipe"] == "draft"
    assert recommend(close, tie=0.0)["recipe"] == "medusa"
    assert recommend(close, tie=0.2)["recipe"] == "eagle"
    assert "No contender qualifies" in render_markdown(
        {
            "workloads": {
                "default": {"contenders": rows[:2], "recommended": None, "free_vs_trained": None, "overrides": []}
            },
            "served_check": True,
            "settings": {
                "num_prompts": 1,
                "max_new_tokens": 1,
                "num_speculative_tokens": 1,
                "temperature": 0.0,
                "tree": None,
            },
        }
    )


def test_a_bakeoff_served_by_llama_cpp_names_it_and_why_a_family_is_not_served(monkeypatch):
    from train.bakeoff.contenders import bakeoff_engine

    medusa = {**_row("toy_medusa", 1.2, 2.4), "kind": "medusa"}
    settings = {"num_prompts": 1, "max_new_tokens": 1, "num_speculative_tokens": 1, "temperature": 0.0, "tree": None}
    contenders = [_row("toy", 1.3, 2.8, verdict="ok"), medusa]
    workload = {"contenders": contenders, "recommended": None, "free_vs_trained": None, "overrides": []}
    text = render_markdown({"workloads": {"default": workload}, "served_check": "llamacpp", "settings": settings})
    assert "Served τ: llama.cpp serving each export" in text
    assert "llama.cpp does not serve medusa drafters" in text  # the row says why it has no served figure
    assert bakeoff_engine("llamacpp") == "llamacpp" and bakeoff_engine("off") is None
    monkeypatch.setattr("train.bakeoff.contenders.missing_reason", lambda engine: "not installed")
    assert bakeoff_engine("auto") is None  # auto: vLLM where it is installed


def test_the_verdict_says_whether_training_paid_off_against_the_best_free_contender():
    rows = [
        _row("toy", 1.30, 2.8),
        _row("toy_eagle", 1.10, 2.9),
        _row("toy_ngram", 1.05, 1.6, trained=False),
        _row("toy_suffix", 2.60, 4.0, trained=False),
        _row("toy_lookahead", 3.00, 5.0, lossless=False, trained=False),  # lossy rows never win
    ]
    verdict = free_vs_trained(rows)
    assert verdict["best_free"] == "toy_suffix" and verdict["best_trained"] == "toy"
    assert verdict["outcome"] == "free" and verdict["speedup_gain"] == pytest.approx(1.30 / 2.60)
    assert verdict["tau_gain"] == pytest.approx(2.8 - 4.0)
    verdict = free_vs_trained(rows[:3])
    assert verdict["outcome"] == "trained" and verdict["speedup_gain"] == pytest.approx(1.30 / 1.05)
    assert free_vs_trained([_row("toy", 1.74, 3.0), _row("toy_suffix", 1.73, 2.7, trained=False)])["outcome"] == "tie"
    assert free_vs_trained(rows[:2]) is None  # nothing free to compare with
    settings = {"num_prompts": 1, "max_new_tokens": 1, "num_speculative_tokens": 1, "temperature": 0.0, "tree": None}
    text = render_markdown(
        {
            "workloads": {
                "fresh": {
                    "contenders": rows[:3],
                    "recommended": recommend(rows[:3]),
                    "free_vs_trained": verdict,
                    "overrides": [],
                },
                "repeated": {
                    "contenders": rows,
                    "recommended": recommend(rows),
                    "free_vs_trained": free_vs_trained(rows),
                    "overrides": ["eval_split=heldout_repeated"],
                },
            },
            "served_check": False,
            "settings": settings,
        }
    )
    assert (
        "## Workload `fresh`" in text and "## Workload `repeated` (eval overrides: eval_split=heldout_repeated)" in text
    )
    assert "**Training paid off here:** the best trained drafter, `toy` (1.30×, τ 2.80)" in text
    assert "The trained contenders trained 1.0–1.0 min each (the `training` column)." in text  # equal time, stated
    assert "**Training did not pay off here:** the best free contender, `toy_suffix` (2.60×, τ 4.00), is 2.00×" in text
    assert "No served check (vLLM not installed, or bakeoff.serve=off)." in text  # a comparison without the reason
    fresh = {"contenders": rows[:3], "recommended": None, "free_vs_trained": None, "overrides": []}
    reason = {"served_check": None, "served_check_reason": "bakeoff.serve=off", "settings": settings}
    text = render_markdown({"workloads": {"fresh": fresh}, **reason})
    assert "No served check (bakeoff.serve=off)." in text  # which of the two, where recorded


@pytest.mark.slow
def test_bakeoff_trains_every_family_on_the_same_data_and_evaluates_them_alike(tmp_path, micro_world):
    register_configs()

    def quoted(*o):
        return "[" + ",".join(f"'{x}'" for x in o) + "]"

    with initialize_config_module(config_module="conf", version_base=None):
        cfg = compose(
            "config",
            overrides=[
                "recipe=toy_bakeoff",
                "target=micro",
                f"run_dir={tmp_path}/bake",
                "data.max_prompts=16",
                "data.sampling.max_new_tokens=16",
                "eval.num_prompts=3",
                "eval.max_new_tokens=12",
                "bakeoff.serve=off",
                f"publish.hub_dir={tmp_path}/hub",  # every contender published: the registry's leaderboard
                "publish.verify_prompts=0",
                "+bakeoff.overrides.all="
                # 4 steps on the micro world: contenders near τ = 1 are published under a bar of 1 (default 1.1)
                + quoted("trainer.max_steps=4", "trainer.batch_size=4", "trainer.save_every=4", "publish.min_tau=1.0"),
                f"+bakeoff.overrides.toy_medusa={quoted('drafter.holdout_samples=4')}",
                "+bakeoff.overrides.toy_eagle="
                + quoted("drafter.select_samples=4", "drafter.layer_ids=[0,1,2]", "drafter.draft_vocab_size=256"),
                "+bakeoff.overrides.toy_peagle="
                + quoted("drafter.select_samples=4", "drafter.layer_ids=[0,1,2]", "drafter.draft_vocab_size=256"),
                f"+bakeoff.overrides.toy_dflash={quoted('drafter.layer_ids=[1,2]')}",
                f"+bakeoff.overrides.toy_dspark={quoted('drafter.layer_ids=[1,2]')}",
                f"+bakeoff.overrides.toy_dflash2={quoted('drafter.layer_ids=[1,2]')}",
                f"+bakeoff.overrides.toy_layer_skip={quoted('drafter.search_samples=4')}",
            ],
        )
        comparison = run_bakeoff(cfg)["bakeoff"]
    root = tmp_path / "bake"
    workloads = comparison["workloads"]
    assert list(workloads) == ["code_continuation", "repeated_requests"]
    rows = workloads["code_continuation"]["contenders"]
    free = ["ngram", "suffix", "lookahead", "layer_skip"]
    parallel = ["pard", "peagle", "dflash", "dspark", "dflash2"]
    assert [r["kind"] for r in rows] == ["draft_lm", "medusa", "eagle3", *parallel, *free]
    for r in rows:
        run = root / r["recipe"]
        assert (run / "data").resolve() == (root / "data").resolve()  # one distilled dataset for all
        report = json.loads((run / "eval" / "eval_report.json").read_text())
        assert (
            report["settings"]
            == json.loads((root / rows[0]["recipe"] / "eval" / "eval_report.json").read_text())["settings"]
        )
        assert report["settings"]["num_speculative_tokens"] == 4 and report["settings"]["tree"] is None
        assert r["lossless"]
        if r["kind"] in ("ngram", "suffix", "lookahead"):  # training-free: no train stage, no weights
            assert r["parameters"] == 0 and r["train_seconds"] == 0 and not r["trained"]
            continue
        summary = json.loads((run / "checkpoints" / "final" / "train_summary.json").read_text())
        assert r["parameters"] == summary["parameters"] > 0 and r["train_seconds"] == summary["seconds"]
        assert r["trained"] == (r["kind"] != "layer_skip")  # its search fits no weight: a free contender
    # one drafter forward per step for the parallel families (and Medusa's heads), γ for sequential chains
    forwards = {r["kind"]: r["draft_forwards_per_step"] for r in rows}
    assert forwards == {
        "draft_lm": 4, "medusa": 1, "eagle3": 4, "pard": 1, "peagle": 1, "dflash": 1, "dspark": 1, "dflash2": 1,
        "ngram": 0, "suffix": 0, "lookahead": 0, "layer_skip": 4,
    }  # fmt: skip
    best = recommend(rows)
    assert best["recipe"] in {r["recipe"] for r in rows} and workloads["code_continuation"]["recommended"] == best
    assert workloads["code_continuation"]["free_vs_trained"] == free_vs_trained(rows)
    # the second workload: the same drafters (trained once, their checkpoints linked), other prompts
    repeated = workloads["repeated_requests"]["contenders"]
    assert [r["recipe"] for r in repeated] == [r["recipe"] for r in rows]
    for r in repeated:
        run = root / "repeated_requests" / r["recipe"]
        assert (run / "checkpoints").resolve() == (root / r["recipe"] / "checkpoints").resolve()
        report = json.loads((run / "eval" / "eval_report.json").read_text())
        assert report["lossless"] and report["settings"]["num_prompts"] == 3
    saved = json.loads((root / "bakeoff" / "comparison.json").read_text())
    assert saved["workloads"]["code_continuation"]["recommended"] == best
    for workload in workloads:
        assert (root / "bakeoff" / f"comparison_{workload}.png").stat().st_size > 0
    text = (root / "bakeoff" / "comparison.md").read_text()
    assert f"**Recommended: `{best['recipe']}` ({best['kind']})**" in text and "## Workload `repeated_requests`" in text
    assert any(f"**{outcome}" in text for outcome in ("Training paid off", "Training did not pay off", "A tie"))
    for r in rows:  # the cost model beside what it predicts: v, the decoding speed-up and τ / (v + γ·c)
        decoding = f"{r['decode_speedup']:.2f}× ({r['predicted_speedup_from_tau']:.2f}×)"
        assert f"| {r['verify_cost']:.2f} | {decoding} |" in text, r["recipe"]
    # the registry: each contender once (as evaluated on the first workload), the leaderboard its figures
    index = {r["model_name"]: r for r in read_index(tmp_path / "hub")}
    assert sorted(index) == sorted(f"{r['recipe']}-{r['kind']}" for r in rows)
    for r in rows:
        published = index[f"{r['recipe']}-{r['kind']}"]
        assert (published["version"], published["tau"], published["speedup"]) == (1, r["tau"], r["speedup"])
    assert {r["category"] for r in index.values()} == set(CATEGORIES)
    board = (tmp_path / "hub" / "site" / "toyworld--micro" / "index.html").read_text()
    assert all(f"{name} v1</a>" in board for name in index)


def test_every_chat_bakeoff_contender_fits_the_chat_target(tmp_path):
    """Every contender's layer ids (the families' defaults, or the recipe's overrides) must pass each family's target
    checks against the chat world's target, as preflight runs them before any stage; every contender trains on whole
    samples (the default trainer.max_seq_len, 512, cut a quarter of the answers); the draft LMs start from the
    world's pretrained sibling."""
    from omegaconf import OmegaConf

    from distill.toyworld.config import CHAT
    from distill.toyworld.target import target_config
    from heads.families import get_family
    from train.bakeoff.contenders import contender_config

    register_configs()
    with initialize_config_module(config_module="conf", version_base=None):
        shared = compose("config", overrides=["recipe=chat_bakeoff"])
        contenders = [contender_config(n, shared, tmp_path / n, serve=None) for n in shared.bakeoff.recipes]
    config = target_config(CHAT)
    checked = set()
    for cfg in contenders:
        assert cfg.target.name_or_path == "toyworld:chat"
        run = OmegaConf.to_object(cfg)
        get_family(run.drafter.kind).check_target(run.drafter, config)
        checked.add(run.drafter.kind)
        assert run.trainer.max_seq_len >= run.data.max_prompt_tokens + run.data.sampling.max_new_tokens
        if run.drafter.kind in ("draft_lm", "pard"):  # pretrained, as real draft models are
            assert run.drafter.init == "toyworld:chat/draft"
    assert {"eagle3", "peagle", "dflash", "dspark", "dflash2", "draft_lm", "pard"} <= checked


def test_a_load_sweep_runs_only_for_contenders_vllm_serves(tmp_path):
    """eval.serve_load for the whole bake-off: lookahead (no vLLM method) is not started on `vllm serve`, the draft LM
    and prompt lookup are."""
    from heads.families import get_family
    from train.bakeoff.contenders import contender_config

    register_configs()
    with initialize_config_module(config_module="conf", version_base=None):
        shared = compose("config", overrides=["recipe=toy_bakeoff", "eval.serve_load=[1,4,16]"])
        loads = {
            n: list(contender_config(n, shared, tmp_path / n, serve=None).eval.serve_load)
            for n in ("toy", "toy_ngram", "toy_lookahead")
        }
    assert get_family("lookahead").not_served("vllm")
    assert loads == {"toy": [1, 4, 16], "toy_ngram": [1, 4, 16], "toy_lookahead": []}


def test_each_category_gets_its_own_recommendation_from_its_prompts_figures():
    """MT-Bench's extraction turns can favour a copying drafter while HumanEval favours a trained one: the verdict per
    category reads each contender's figures on that category's prompts alone."""
    from train.bakeoff.verdicts import category_verdicts

    def with_categories(row, **figures):
        return {**row, "categories": {c: {"tau": t, "alpha": 0.3, "speedup": s} for c, (t, s) in figures.items()}}

    rows = [
        with_categories(_row("smollm2", 0.9, 1.3), **{"mt_bench/extraction": (1.2, 0.8), "humaneval": (1.5, 1.2)}),
        with_categories(
            _row("smollm2_suffix", 1.0, 1.5, trained=False),
            **{"mt_bench/extraction": (3.1, 1.6), "humaneval": (1.3, 0.9)},
        ),
    ]
    verdicts = category_verdicts(rows)
    assert {c: v["recipe"] for c, v in verdicts.items()} == {
        "mt_bench/extraction": "smollm2_suffix",
        "humaneval": "smollm2",
    }
    assert category_verdicts([with_categories(_row("a", 1.0, 1.0), humaneval=(1.0, 1.0))]) == {}  # one category
    settings = {"num_prompts": 1, "max_new_tokens": 1, "num_speculative_tokens": 1, "temperature": 0.0, "tree": None}
    workload = {"contenders": rows, "recommended": None, "free_vs_trained": None, "by_category": verdicts}
    workload["overrides"] = []
    text = render_markdown({"workloads": {"w": workload}, "served_check": None, "settings": settings})
    assert "| recipe | mt_bench/extraction | humaneval |" in text
    assert "| smollm2_suffix | 1.60× (τ 3.10) | 0.90× (τ 1.30) |" in text
    assert "| **recommended** | `smollm2_suffix` | `smollm2` |" in text


def test_the_main_jobs_own_contender_trains_with_the_command_lines_settings(tmp_path):
    """`python -m train trainer.max_steps=300` reaches the main job's EAGLE-3 (bakeoff.own), not the retrieval
    contender's recipe; each contender keeps the γ its own override gives it over the shared eval settings."""
    from train.bakeoff.contenders import contender_config

    register_configs()
    with initialize_config_module(config_module="conf", version_base=None):
        shared = compose("config", overrides=["trainer.max_steps=300", "drafter.draft_vocab_size=4096"])
        contenders = {n: contender_config(n, shared, tmp_path / n, serve=None) for n in shared.bakeoff.recipes}
    assert shared.recipe_name == "smollm2_main" and list(contenders) == ["smollm2", "smollm2_retrieval"]
    eagle, retrieval = contenders["smollm2"], contenders["smollm2_retrieval"]
    assert eagle.trainer.max_steps == 300 and eagle.drafter.draft_vocab_size == 4096
    assert retrieval.drafter.kind == "retrieval" and retrieval.trainer.max_steps != 300
    assert (eagle.eval.num_speculative_tokens, retrieval.eval.num_speculative_tokens) == (2, 4)
    assert eagle.eval.max_new_tokens == retrieval.eval.max_new_tokens == 128  # measured alike otherwise


def test_the_published_line_names_the_winner_and_what_the_trained_drafter_reached():
    from train.bakeoff.verdicts import published_line

    free = _row("smollm2_retrieval", 1.6, 1.9, trained=False) | {"kind": "retrieval", "speedup_spread": None}
    trained = _row("smollm2", 0.9, 1.2) | {"kind": "eagle3", "break_even_tau": 1.45}
    trained["training_data"] = {"answer_tokens_seen": 246_000}
    line = published_line(free, [trained, free], Path("d"))
    assert line.startswith("[eval] published: retrieval τ 1.90, speed-up 1.60× (no interval recorded")
    assert "(lossless); eagle3 τ 1.20, 0.90× after 246k answer tokens (break-even τ ≈ 1.45: train/README.md)" in line
    assert line.endswith("drafter: d")


def test_a_shared_baseline_bakeoff_measures_each_workloads_contenders_in_one_run(tmp_path, micro_world):
    """bakeoff.shared_baseline (the main job's): per workload, every contender in one interleaved run against one
    set of plain decodes; each report lands in its own run directory, which a rerun resumes rather than re-measures."""
    register_configs()
    with initialize_config_module(config_module="conf", version_base=None):
        cfg = compose(
            "config",
            overrides=[
                "recipe=toy_bakeoff",
                "target=micro",
                f"run_dir={tmp_path}/bake",
                "bakeoff.recipes=[toy_ngram,toy_suffix]",
                "bakeoff.shared_baseline=true",
                "bakeoff.serve=off",
                "data.max_prompts=8",
                "data.sampling.max_new_tokens=8",
                "eval.num_prompts=3",
                "eval.max_new_tokens=12",
                "eval.gamma_sweep=[]",
            ],
        )
        run_bakeoff(cfg)
        root = tmp_path / "bake"
        dirs = {"code_continuation": root, "repeated_requests": root / "repeated_requests"}

        def reports():
            return {
                (w, name): json.loads((d / name / "eval" / "eval_report.json").read_text())
                for w, d in dirs.items()
                for name in ("toy_ngram", "toy_suffix")
            }

        first = reports()
        for workload in dirs:
            ngram, suffix = first[workload, "toy_ngram"], first[workload, "toy_suffix"]
            assert ngram["shared_baseline_with"] == ["suffix"] and suffix["shared_baseline_with"] == ["ngram"]
            assert ngram["tokens_per_second"]["autoregressive"] == suffix["tokens_per_second"]["autoregressive"]
            assert ngram["lossless"] and suffix["lossless"]
        assert first["code_continuation", "toy_ngram"]["prompts"] != first["repeated_requests", "toy_ngram"]["prompts"]
        run_bakeoff(cfg)  # resumed: every report still valid, none measured again
    assert reports() == first
