"""The dry-run planner: exact parameter bytes from config.json alone, every real recipe planned offline."""

import os
import subprocess
import sys

import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from distill.errors import DistillError
from distill.targets.known import KNOWN_TARGETS
from distill.targets.load import target_config
from heads.config import DraftLMConfig, Eagle3Config, MedusaConfig
from heads.draft_lm import DraftLM
from heads.eagle import Eagle3Drafter
from heads.medusa import MedusaHeads
from heads.vocab import build_draft_vocab
from tests.conftest import REPO
from train.config import PlanConfig, RunConfig, register_configs
from train.planner import PlanError, _state_bytes, plan_run, read_launch, render_plan

REAL_RECIPES = ["eagle_llama8b", "eagle_llama70b", "medusa_vicuna7b", "pard_llama8b", "dflash_llama8b"]


def _run_config(micro_world, drafter, **plan) -> RunConfig:
    cfg = RunConfig(drafter=drafter, plan=PlanConfig(**plan))
    cfg.target.name_or_path = str(micro_world.target_dir)  # a local HF directory: its config.json is read
    return cfg


def _param_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())


def test_planned_bytes_equal_the_real_models(micro_world, target, tokenizer):
    real_target = _param_bytes(target)  # float32, as target.dtype says
    torch.manual_seed(0)
    cases = [
        (
            DraftLMConfig(hidden_size=32, intermediate_size=64, num_attention_heads=1, num_key_value_heads=1),
            DraftLM.from_config(
                DraftLMConfig(hidden_size=32, intermediate_size=64, num_attention_heads=1, num_key_value_heads=1),
                target.config,
                tokenizer,
            ),
        ),
        (MedusaConfig(num_heads=3), MedusaHeads.from_target(MedusaConfig(num_heads=3), target)),
        (
            Eagle3Config(layer_ids=[0, 1, 2], draft_vocab_size=200),
            Eagle3Drafter.from_target(
                Eagle3Config(layer_ids=[0, 1, 2], draft_vocab_size=200),
                target,
                build_draft_vocab(torch.ones(target.config.vocab_size), 200)[0],
            ),
        ),
    ]
    for drafter_cfg, real in cases:
        plan = plan_run(_run_config(micro_world, drafter_cfg, accelerate="single"))
        assert plan["memory_per_gpu"]["target_weights"] == real_target
        assert plan["drafter_params"] == sum(p.numel() for p in real.parameters())
        assert plan["drafter_trainable_params"] == sum(p.numel() for p in real.parameters() if p.requires_grad)
        trainable = plan["drafter_trainable_params"]
        # one process, fp32 AdamW: 4 B weights (all), 4 B gradients + 8 B moments (trained ones)
        assert plan["memory_per_gpu"]["drafter_weights"] == _param_bytes(real)
        assert plan["memory_per_gpu"]["gradients"] == 4 * trainable
        assert plan["memory_per_gpu"]["optimizer"] == 8 * trainable


def test_zero_and_fsdp_shard_what_they_claim():
    P, T, n = 1000, 600, 8
    assert _state_bytes("ddp", n, True, P, T) == {"drafter_weights": 4 * P, "gradients": 4 * T, "optimizer": 8 * T}
    assert _state_bytes("zero2", n, True, P, T) == {
        "drafter_weights": 2 * P,
        "gradients": 2 * T / n,
        "optimizer": 12 * T / n,
    }
    assert _state_bytes("zero3", n, True, P, T) == {
        "drafter_weights": 2 * P / n,
        "gradients": 2 * T / n,
        "optimizer": 12 * T / n,
    }
    assert _state_bytes("fsdp", n, True, P, T) == {
        "drafter_weights": 4 * P / n,
        "gradients": 4 * T / n,
        "optimizer": 8 * T / n,
    }


def test_launch_is_read_from_the_accelerate_configs():
    assert (
        read_launch(PlanConfig(accelerate="zero3")).strategy,
        read_launch(PlanConfig(accelerate="zero3")).processes,
    ) == ("zero3", 8)
    assert read_launch(PlanConfig(accelerate="ddp", num_processes=2)).processes == 2
    assert read_launch(PlanConfig(accelerate=str(REPO / "conf" / "accelerate" / "fsdp.yaml"))).strategy == "fsdp"
    with pytest.raises(PlanError, match="neither one of"):
        read_launch(PlanConfig(accelerate="zero9"))


def test_unknown_target_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty cache
    with pytest.raises(DistillError, match="hf download acme/unknown-model config.json"):
        target_config("acme/unknown-model")


@pytest.mark.parametrize("recipe", REAL_RECIPES)
def test_every_real_recipe_is_planned_offline_and_fits(recipe, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # nothing cached: the known-targets table answers
    register_configs()
    with initialize_config_module(config_module="conf", version_base=None):
        cfg = OmegaConf.to_object(compose("config", overrides=[f"recipe={recipe}", "dry_run=true"]))
    plan = plan_run(cfg)
    assert plan["fits"], plan["memory_per_gpu"]
    assert plan["target_params"] > 6e9 and plan["processes"] == 8
    assert plan["train_hours"] > 0 and plan["steps"] == cfg.trainer.max_steps
    if cfg.drafter.kind == "eagle3":  # three fused layers + the last hidden state, bf16, for every token
        hidden = KNOWN_TARGETS[cfg.target.name_or_path]["hidden_size"]
        assert plan["offline_feature_bytes"] == plan["samples"] * plan["tokens_per_sample_max"] * 4 * hidden * 2


def _dry_run(tmp_path, *overrides):
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    return subprocess.run(
        [sys.executable, "-m", "train", "recipe=eagle_llama70b", "dry_run=true", *overrides],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow  # python -m train in fresh interpreters
def test_dry_run_cli_writes_nothing_and_flags_a_misfit(tmp_path):
    """eagle_llama70b fits 8 × 80 GB with the target sharded by ZeRO-3 or taken from vLLM; replicated it does not."""
    ok = _dry_run(tmp_path)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "frozen target: sharded over 8 processes (ZeRO-3)" in ok.stdout
    assert "target_weights          16.4 GiB" in ok.stdout and "of 74.5 GiB: fits" in ok.stdout  # 131.4 GiB / 8
    replicated = _dry_run(tmp_path, "plan.accelerate=ddp")
    assert replicated.returncode == 3
    assert "target_weights         131.4 GiB" in replicated.stdout and "DOES NOT FIT" in replicated.stdout
    assert "the frozen target alone exceeds one GPU, and every process holds a replica" in replicated.stdout
    assert "shard it with plan.accelerate=zero3 or fsdp" in replicated.stdout
    assert {p.name for p in tmp_path.iterdir()} <= {"hf"}  # no run directory
    assert (
        not any(p.is_file() for p in (tmp_path / "hf").rglob("*")) if (tmp_path / "hf").exists() else True
    )  # nothing downloaded


def test_features_from_vllm_count_only_the_targets_heads(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    register_configs()
    with initialize_config_module(config_module="conf", version_base=None):
        overrides = ["recipe=eagle_llama70b", "drafter.features=vllm", "plan.accelerate=ddp"]
        plan = plan_run(OmegaConf.to_object(compose("config", overrides=overrides)))
    hidden, vocab = (KNOWN_TARGETS["meta-llama/Llama-3.3-70B-Instruct"][k] for k in ("hidden_size", "vocab_size"))
    assert plan["memory_per_gpu"]["target_weights"] == (2 * vocab * hidden + hidden) * 2  # untied: embed, lm_head, norm
    assert plan["fits"] and "target_gathered" not in plan["memory_per_gpu"]
    text = render_plan(plan)
    assert "embeddings, final norm and lm_head only (features from vLLM)" in text
    assert "written once by vLLM before training" in text


def test_stored_features_run_the_targets_body_once_per_sample_not_per_step(monkeypatch, tmp_path):
    """Training on stored features costs the store's one pass over the data plus each step's lm_head, not a target
    forward per step (online); vLLM's store is written in distillation, leaving training the lm_head alone."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    register_configs()
    hours = {}
    with initialize_config_module(config_module="conf", version_base=None):
        for features in ("online", "offline", "vllm"):
            overrides = ["recipe=eagle_llama70b", f"drafter.features={features}", "plan.accelerate=ddp"]
            hours[features] = plan_run(OmegaConf.to_object(compose("config", overrides=overrides)))["train_hours"]
    assert hours["online"] > 1.3 * hours["offline"] > 1.3 * hours["vllm"], hours


@pytest.mark.parametrize("accelerate", ["zero3", "fsdp"])
def test_a_sharded_target_counts_one_share_per_gpu(micro_world, accelerate):
    replicated = plan_run(_run_config(micro_world, Eagle3Config(layer_ids=[0, 1, 2]), accelerate="ddp"))
    cfg = _run_config(micro_world, Eagle3Config(layer_ids=[0, 1, 2]), accelerate=accelerate, num_processes=4)
    sharded = plan_run(cfg)
    whole = replicated["memory_per_gpu"]["target_weights"]
    assert sharded["target_sharding"] == accelerate and sharded["memory_per_gpu"]["target_weights"] == whole // 4
    cfg.trainer.target_sharding = "replicate"  # the user's choice stands
    assert plan_run(cfg)["memory_per_gpu"]["target_weights"] == whole


@pytest.mark.parametrize("native", [True, False])
def test_a_cpu_plan_speaks_of_this_machines_ram_and_the_precision_it_trains_in(micro_world, monkeypatch, native):
    """On a CPU the plan counts against the machine's RAM, in the precision trainer.mixed_precision=native resolves
    to there (bf16 only with AVX-512-BF16 or AMX), with times at its measured matmul rate; no GPU is mentioned."""
    from types import SimpleNamespace

    import eval.machine
    import train.planner as planner

    monkeypatch.setattr(planner, "ram_bytes", lambda: 8 * 2**30)
    monkeypatch.setattr("distill.device.native_bf16", lambda device: native)
    monkeypatch.setattr(eval.machine, "current", lambda: SimpleNamespace(matmul_gflops=100.0))
    cfg = _run_config(micro_world, Eagle3Config(layer_ids=[0, 1, 2]), device="cpu")
    cfg.trainer.mixed_precision = "native"
    plan = plan_run(cfg)
    assert plan["device"] == "cpu" and plan["gpu_memory"] == 8 * 2**30 and plan["fits"]
    assert plan["mixed_precision"] == ("bf16" if native else "no")
    text = render_plan(plan)
    assert f"1 process(es) on this CPU, training in {'bf16' if native else 'fp32'}" in text
    assert "memory (this machine's RAM, all processes):" in text and "of 8.0 GiB: fits" in text
    assert "GPU" not in text and "0.0 M" not in text and "0.00" not in text
    assert "time (roofline estimate, at this CPU's measured matmul rate)" in text
    gpu = plan_run(_run_config(micro_world, Eagle3Config(layer_ids=[0, 1, 2]), device="gpu"))
    assert gpu["gpu_memory"] == 80e9 and gpu["mixed_precision"] == "bf16" and "memory per GPU" in render_plan(gpu)


def test_small_runs_are_printed_in_units_that_say_something():
    from train.planner import count, duration, size

    assert [count(840, "tokens"), count(23_040, "tokens"), count(1.2e6, "tokens"), count(3.4e9, "tokens")] == [
        "840 tokens",
        "23.0 k tokens",
        "1.2 M tokens",
        "3.40 B tokens",
    ]
    assert [size(512), size(589.8e6), size(3.1e9), size(1.2e12)] == ["512 B", "589.8 MB", "3.1 GB", "1.20 TB"]
    assert [duration(40 / 3600), duration(0.2), duration(3.5)] == ["40 s", "12 min", "3.5 h"]


def test_a_cpu_run_beyond_the_machines_ram_is_refused_before_any_stage_unless_told(micro_world, monkeypatch):
    import train.planner as planner
    from train.errors import PipelineError
    from train.stages.preflight import check_run

    monkeypatch.setattr(planner, "ram_bytes", lambda: 2**20)  # 1 MiB
    cfg = _run_config(micro_world, Eagle3Config(layer_ids=[0, 1, 2]), device="cpu")
    with pytest.raises(PipelineError, match=r"the plan needs .* GiB of memory and this machine has 0\.0 GiB .* lower"):
        check_run(cfg)
    cfg.plan.check_memory = False
    check_run(cfg)
    cfg.plan.check_memory, cfg.stages = True, ["distill"]  # nothing trains: nothing to fit
    check_run(cfg)
