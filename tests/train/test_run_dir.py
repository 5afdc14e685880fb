"""Which run directory `python -m train` writes to when run_dir is not given."""

from omegaconf import OmegaConf

from eval.config import EvalConfig
from heads.config import DraftLMConfig
from train.config import RunConfig, TrainerConfig
from train.pipeline import resolve_run_dir


def _cfg(**overrides):
    cfg = RunConfig(drafter=DraftLMConfig(), **overrides)
    return cfg, OmegaConf.to_container(OmegaConf.structured(cfg))


def _save(run_dir, cfg_dict):
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg_dict))


def test_rerun_reuses_the_latest_run_with_the_same_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg, cfg_dict = _cfg()
    _save(tmp_path / "runs/toy/20260101-000000", cfg_dict)
    _save(tmp_path / "runs/toy/20260102-000000", cfg_dict)
    other = _cfg(trainer=TrainerConfig(max_steps=7))[1]
    _save(tmp_path / "runs/toy/20260103-000000", other)  # newest, but a different config
    assert resolve_run_dir(cfg, cfg_dict).name == "20260102-000000"
    # Where the job runs and which stages run don't make it another run.
    cfg2, cfg2_dict = _cfg(stages=["eval"], device="cpu")
    assert resolve_run_dir(cfg2, cfg2_dict).name == "20260102-000000"


def test_new_run_or_changed_config_gets_a_fresh_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg, cfg_dict = _cfg()
    _save(tmp_path / "runs/toy/20260101-000000", cfg_dict)
    fresh = resolve_run_dir(_cfg(new_run=True)[0], cfg_dict)
    assert fresh.parent.as_posix() == "runs/toy"
    assert fresh.name != "20260101-000000"
    changed, changed_dict = _cfg(eval=EvalConfig(num_speculative_tokens=2))
    assert resolve_run_dir(changed, changed_dict).name != "20260101-000000"
    assert resolve_run_dir(_cfg(run_dir="somewhere")[0], cfg_dict).as_posix() == "somewhere"
