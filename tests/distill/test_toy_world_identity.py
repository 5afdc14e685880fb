"""A rebuilt toy world is another target: its distilled data must not be lent to the new one under the same alias."""

from distill.config import DataConfig, TargetConfig
from distill.stage.manifest import config_hash, input_identities


def test_a_rebuilt_toy_world_changes_the_distill_hash(micro_world, monkeypatch):
    target, data = TargetConfig(name_or_path="toyworld:micro"), DataConfig()
    assert input_identities(target, data)["target"] == micro_world.root.name  # the world it loads, by its key
    before = config_hash(target, data)
    monkeypatch.setattr("distill.toyworld.build.world_name", lambda size: f"{size}-another-build")
    assert config_hash(target, data) != before  # another config or corpus: distilled again, not reused


def test_a_changed_drafter_init_retrains(micro_world, tmp_path, monkeypatch):
    """drafter.init stands for its weights: new weights in the same directory, or a rebuilt toy-world sibling, train
    again instead of reusing the checkpoint trained from the old ones."""
    from dataclasses import asdict

    from heads.config import DraftLMConfig
    from train.config import RunConfig
    from train.pipeline import stage_hashes

    def train_hash(init):
        cfg = RunConfig(drafter=DraftLMConfig(init=init))
        return stage_hashes(cfg, asdict(cfg))["train"]

    init = tmp_path / "draft"
    init.mkdir()
    (init / "model.safetensors").write_bytes(b"old weights")
    before = train_hash(str(init))
    (init / "model.safetensors").write_bytes(b"new weights")
    assert train_hash(str(init)) != before
    sibling = train_hash("toyworld:chat/draft")
    monkeypatch.setattr("distill.toyworld.sibling.sibling_name", lambda size: "draft-other-settings")
    assert train_hash("toyworld:chat/draft") != sibling
