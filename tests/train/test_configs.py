"""Every YAML under conf/ and recipes/ composes against the structured schema (no recipe rots)."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from tests.conftest import REPO
from train.config import RunConfig, register_configs

register_configs()
import distill.__main__  # noqa: E402,F401  (registers distill_schema)
import eval.__main__  # noqa: E402,F401  (registers eval_schema)

GROUP_YAMLS = sorted(p for p in (REPO / "conf").glob("*/*.yaml") if p.parent.name != "accelerate")  # accelerate's own files
ACCELERATE_YAMLS = sorted((REPO / "conf" / "accelerate").glob("*.yaml"))
RECIPES = sorted((REPO / "recipes").glob("*.yaml"))
REQUIRED = {"target/hf.yaml": ["target.name_or_path=some/model"], "data/jsonl.yaml": ["data.prompts=p.jsonl"]}


@pytest.fixture(autouse=True)
def _hydra():
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="conf", version_base=None):
        yield
    GlobalHydra.instance().clear()


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_recipe_composes(path):
    cfg = compose("config", overrides=[f"recipe={path.stem}"])
    run = OmegaConf.to_object(cfg)
    assert isinstance(run, RunConfig) and run.recipe_name == path.stem
    assert path.read_text().startswith("#"), "a recipe opens with a comment: what, prerequisites, launch command"


@pytest.mark.parametrize("path", GROUP_YAMLS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_group_option_composes(path):
    key = f"{path.parent.name}/{path.name}"
    cfg = compose("config", overrides=[f"{path.parent.name}={path.stem}", *REQUIRED.get(key, [])])
    OmegaConf.to_object(cfg)


@pytest.mark.parametrize("name,overrides", [("distill", ["out_dir=x"]), ("eval", ["drafter_dir=d", "prompts=p.jsonl", "out_dir=o"])])
def test_stage_apps_compose(name, overrides):
    OmegaConf.to_object(compose(name, overrides=overrides))


def test_misspelt_key_is_an_error():
    with pytest.raises(Exception, match="lrr"):
        compose("config", overrides=["trainer.lrr=0.1"])


def test_every_yaml_is_covered():
    assert len(RECIPES) >= 2 and len(GROUP_YAMLS) >= 8
    assert {p.stem for p in RECIPES} >= {"toy", "toy_draft", "toy_medusa", "medusa_vicuna7b", "toy_eagle", "eagle_llama8b", "eagle_llama70b"}


def test_medusa_vicuna7b_is_the_papers_setting_and_validates():
    from eval.run import check_settings
    from transformers.utils.chat_template_utils import _compile_jinja_template

    run = OmegaConf.to_object(compose("config", overrides=["recipe=medusa_vicuna7b"]))
    assert run.target.name_or_path == "lmsys/vicuna-7b-v1.3" and run.drafter.kind == "medusa"
    assert (run.drafter.num_heads, run.drafter.num_layers) == (5, 1)
    assert run.eval.num_speculative_tokens <= run.drafter.num_heads and max(run.eval.gamma_sweep) <= run.drafter.num_heads
    check_settings(run.eval)
    assert run.eval.serve == "vllm"  # real recipes publish only what vLLM served as we measured
    # Vicuna ships no chat template: the recipe's must render FastChat's vicuna_v1.1 format.
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}]
    rendered = _compile_jinja_template(run.target.chat_template).render(messages=messages, add_generation_prompt=True, bos_token="<s>", eos_token="</s>")
    system = "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, detailed, and polite answers to the user's questions."
    assert rendered == f"<s>{system} USER: Hi ASSISTANT: Hello!</s>USER: Bye ASSISTANT:"


@pytest.mark.parametrize("name,target,layers", [("eagle_llama8b", "meta-llama/Llama-3.1-8B-Instruct", [2, 16, 29]), ("eagle_llama70b", "meta-llama/Llama-3.3-70B-Instruct", [2, 40, 77])])
def test_real_eagle_recipes_validate(name, target, layers):
    from eval.run import check_settings

    run = OmegaConf.to_object(compose("config", overrides=[f"recipe={name}"]))
    assert run.target.name_or_path == target and run.drafter.kind == "eagle3"
    assert run.drafter.layer_ids == layers and run.drafter.ttt_steps == 7 and run.drafter.draft_vocab_size == 32000
    assert run.data.prompts.endswith("ShareGPT_Vicuna_unfiltered") and [m.prompts for m in run.data.mix] == ["HuggingFaceH4/ultrachat_200k"]
    assert run.data.backend == "vllm" and run.eval.tree == "dynamic"
    check_settings(run.eval)
    assert run.eval.serve == "vllm"  # real recipes publish only what vLLM served as we measured


@pytest.mark.parametrize("path", ACCELERATE_YAMLS, ids=lambda p: p.stem)
def test_accelerate_configs_load_with_accelerate(path):
    """Each launcher config is one accelerate reads as is, with the multi-node fields present."""
    from accelerate.commands.config.config_args import load_config_from_file

    cfg = load_config_from_file(str(path))
    expected = {"ddp": "MULTI_GPU", "zero2": "DEEPSPEED", "zero3": "DEEPSPEED", "fsdp": "FSDP"}[path.stem]
    assert str(cfg.distributed_type).split(".")[-1] == expected
    assert {"num_machines", "machine_rank", "main_process_ip", "main_process_port"} <= set(OmegaConf.load(path))  # multi-node fields, spelled out
    assert cfg.num_processes == 8 and cfg.use_cpu is False
    if expected == "DEEPSPEED":
        assert cfg.deepspeed_config["zero_stage"] == int(path.stem[-1])
    assert path.read_text().startswith("#") and "accelerate launch --config_file" in path.read_text()
