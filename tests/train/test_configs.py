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

GROUP_YAMLS = sorted(p for p in (REPO / "conf").glob("*/*.yaml"))
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
    assert {p.stem for p in RECIPES} >= {"toy", "toy_draft"}
