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

CONF = REPO / "conf"
# Every group option, however deep (recursive glob); the primary configs sit in conf/ itself and
# conf/accelerate/ holds accelerate's own files.
GROUP_YAMLS = sorted(
    p for p in CONF.rglob("*.yaml") if p.parent != CONF and p.relative_to(CONF).parts[0] != "accelerate"
)
ACCELERATE_YAMLS = sorted((CONF / "accelerate").glob("*.yaml"))
RECIPES = sorted((REPO / "recipes").rglob("*.yaml"))
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


def _group(path: Path) -> str:
    return path.parent.relative_to(CONF).as_posix()


@pytest.mark.parametrize("path", GROUP_YAMLS, ids=lambda p: f"{_group(p)}/{p.stem}")
def test_group_option_composes(path):
    key = f"{_group(path)}/{path.name}"
    cfg = compose("config", overrides=[f"{_group(path)}={path.stem}", *REQUIRED.get(key, [])])
    OmegaConf.to_object(cfg)


def _base(group: str, defaults: list):
    """What a group option starts from before its own values: its schema's defaults (RunConfig's
    field, or the `<kind>_schema` its defaults list selects), then the same-group options it lists."""
    from hydra.core.config_store import ConfigStore

    run = OmegaConf.structured(RunConfig)
    base = None if OmegaConf.is_missing(run, group) else run[group]  # drafter: MISSING until a schema is chosen
    for name in defaults:
        assert isinstance(name, str), f"{group}: expected plain defaults entries, got {name!r}"
        stored = ConfigStore.instance().repo.get(group, {}).get(f"{name}.yaml")
        if stored is not None:  # the schema (drafter group)
            base = OmegaConf.structured(stored.node)
        else:  # another option of the same group (eval/served_eagle_trees lists served)
            parent = OmegaConf.load(CONF / group / f"{name}.yaml")
            base = OmegaConf.merge(_base(group, list(parent.pop("defaults", []))), parent)
    assert base is not None, f"{group}: no schema selected"
    return base


def _leaves(node, prefix=""):
    for key, value in node.items():
        if OmegaConf.is_dict(value) and len(value):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


DEFAULT_FREE_GROUPS = ("trainer", "eval", "drafter")


@pytest.mark.parametrize(
    "path", [p for p in GROUP_YAMLS if _group(p) in DEFAULT_FREE_GROUPS], ids=lambda p: f"{_group(p)}/{p.stem}"
)
def test_group_yaml_restates_no_default(path):
    """Defaults live only in the dataclasses: a group option holds what differs from them."""
    own = OmegaConf.load(path)
    base = _base(_group(path), list(own.pop("defaults", [])))
    merged = OmegaConf.merge(base, own)  # typed as the schema: `lr: 3e-3` compares as 0.003
    restated = [key for key in _leaves(own) if OmegaConf.select(merged, key) == OmegaConf.select(base, key)]
    assert not restated, f"{path.relative_to(REPO)} restates the default of {restated}: delete them (or change them)"


@pytest.mark.parametrize(
    "name,overrides", [("distill", ["out_dir=x"]), ("eval", ["drafter_dir=d", "prompts=p.jsonl", "out_dir=o"])]
)
def test_stage_apps_compose(name, overrides):
    OmegaConf.to_object(compose(name, overrides=overrides))


def test_misspelt_key_is_an_error():
    with pytest.raises(Exception, match="lrr"):
        compose("config", overrides=["trainer.lrr=0.1"])


def test_toy_ngram_only_evaluates_and_publishes():
    run = OmegaConf.to_object(compose("config", overrides=["recipe=toy_ngram"]))
    assert run.drafter.kind == "ngram" and run.stages == ["eval", "publish"] and run.eval.tree is None


def test_every_yaml_is_covered():
    assert len(RECIPES) >= 2 and len(GROUP_YAMLS) >= 8
    assert {p.stem for p in RECIPES} >= {
        "toy",
        "toy_draft",
        "toy_medusa",
        "medusa_vicuna7b",
        "toy_eagle",
        "eagle_llama8b",
        "eagle_llama70b",
        "toy_ngram",
        "toy_pard",
        "toy_peagle",
        "toy_dflash",
        "toy_dspark",
        "toy_dflash2",
        "pard_llama8b",
        "dflash_llama8b",
        "dspark_qwen3_8b",
    }
    assert {f"{_group(p)}/{p.stem}" for p in GROUP_YAMLS} >= {
        "drafter/ngram",
        "drafter/pard",
        "drafter/peagle",
        "drafter/dflash",
        "drafter/dspark",
        "drafter/dflash2",
        "drafter/eagle1",
        "drafter/eagle3",
        "data/sharegpt_ultrachat",
        "eval/served",
        "eval/served_eagle_trees",
        "trainer/eagle3_llama",
    }
    assert {p.stem for p in RECIPES} == {p.stem for p in (REPO / "recipes").glob("*.yaml")}, (
        "recipes are registered from recipes/ itself, not subfolders"
    )


def test_medusa_vicuna7b_is_the_papers_setting_and_validates():
    from transformers.utils.chat_template_utils import _compile_jinja_template

    from eval.run import check_settings

    run = OmegaConf.to_object(compose("config", overrides=["recipe=medusa_vicuna7b"]))
    assert run.target.name_or_path == "lmsys/vicuna-7b-v1.3" and run.drafter.kind == "medusa"
    assert (run.drafter.num_heads, run.drafter.num_layers) == (5, 1)
    assert (
        run.eval.num_speculative_tokens <= run.drafter.num_heads and max(run.eval.gamma_sweep) <= run.drafter.num_heads
    )
    check_settings(run.eval)
    assert run.eval.serve == "vllm"  # real recipes publish only what vLLM served as we measured
    # Vicuna ships no chat template: the recipe's must render FastChat's vicuna_v1.1 format.
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Bye"},
    ]
    rendered = _compile_jinja_template(run.target.chat_template).render(
        messages=messages, add_generation_prompt=True, bos_token="<s>", eos_token="</s>"
    )
    system = (
        "A chat between a curious user and an artificial intelligence assistant. "
        "The assistant gives helpful, detailed, and polite answers to the user's questions."
    )
    assert rendered == f"<s>{system} USER: Hi ASSISTANT: Hello!</s>USER: Bye ASSISTANT:"


@pytest.mark.parametrize(
    "name,target,layers",
    [
        ("eagle_llama8b", "meta-llama/Llama-3.1-8B-Instruct", [2, 16, 29]),
        ("eagle_llama70b", "meta-llama/Llama-3.3-70B-Instruct", [2, 40, 77]),
    ],
)
def test_real_eagle_recipes_validate(name, target, layers):
    from eval.run import check_settings

    run = OmegaConf.to_object(compose("config", overrides=[f"recipe={name}"]))
    assert run.target.name_or_path == target and run.drafter.kind == "eagle3"
    assert run.drafter.layer_ids == layers and run.drafter.ttt_steps == 7 and run.drafter.draft_vocab_size == 32000
    assert run.data.prompts.endswith("ShareGPT_Vicuna_unfiltered") and [m.prompts for m in run.data.mix] == [
        "HuggingFaceH4/ultrachat_200k"
    ]
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
    assert {"num_machines", "machine_rank", "main_process_ip", "main_process_port"} <= set(
        OmegaConf.load(path)
    )  # multi-node fields, spelled out
    assert cfg.num_processes == 8 and cfg.use_cpu is False
    if expected == "DEEPSPEED":
        assert cfg.deepspeed_config["zero_stage"] == int(path.stem[-1])
    assert path.read_text().startswith("#") and "accelerate launch --config_file" in path.read_text()


def test_every_training_lever_benchmarked_is_a_setting_the_recipe_accepts():
    """scripts/bench_levers.py changes one setting of the main job's EAGLE-3 per lever: each must compose and pass
    the training checks, or the benchmark would stop mid-way (or measure a lever that changed nothing)."""
    from tests.conftest import import_script
    from train.setups import training_setup
    from train.stages.preflight import _check_training

    levers = import_script("bench_levers").LEVERS
    base = OmegaConf.to_object(compose("config", overrides=["recipe=smollm2"]))
    for name, (overrides, _) in levers.items():
        run = OmegaConf.to_object(compose("config", overrides=["recipe=smollm2", *overrides]))
        _check_training(training_setup(run.drafter.kind), run.drafter.kind, run.trainer)
        changed = [g for g in ("data", "drafter", "trainer") if getattr(run, g) != getattr(base, g)]
        assert bool(changed) == bool(overrides), name


def test_the_gpu_point_is_the_main_jobs_recipe_at_a_hundred_times_its_largest_cpu_point():
    """scripts/bench_gpu_point.py: its overrides compose and pass the training checks; rows seen are scale × the CPU
    curve's largest point, distilled by vLLM, and its eval decodes what the main job's does (the same held-out set)."""
    from tests.conftest import import_script
    from train.setups import training_setup
    from train.stages.preflight import _check_training

    script = import_script("bench_gpu_point")
    args = script.parse_args([])
    overrides = [o for o in script.overrides(args) if not o.startswith("run_dir=")]
    run = OmegaConf.to_object(compose("config", overrides=overrides))
    _check_training(training_setup(run.drafter.kind), run.drafter.kind, run.trainer)
    largest = script.CPU_LARGEST["steps"] * script.CPU_LARGEST["batch_size"]
    assert run.trainer.max_steps * run.trainer.batch_size >= 100 * largest and run.data.backend == "vllm"
    assert run.data.max_prompts + run.data.mix[0].max_prompts == round(100 * largest / args.epochs)
    assert run.drafter.kind == "eagle3" and run.drafter.features == "online"
    main_job = OmegaConf.to_object(compose("config", overrides=["recipe=smollm2_main"]))
    for key in ("num_prompts", "max_new_tokens", "engine", "num_speculative_tokens", "temperature"):
        assert getattr(run.eval, key) == getattr(main_job.eval, key), key
    assert run.eval_prompts == main_job.eval_prompts
