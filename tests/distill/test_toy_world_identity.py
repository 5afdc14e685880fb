"""A rebuilt toy world is another target: its distilled data must not be lent to the new one under the same alias."""

from distill.config import DataConfig, TargetConfig
from distill.run import config_hash, input_identities


def test_a_rebuilt_toy_world_changes_the_distill_hash(micro_world, monkeypatch):
    target, data = TargetConfig(name_or_path="toyworld:micro"), DataConfig()
    assert input_identities(target, data)["target"] == micro_world.root.name  # the world it loads, by its key
    before = config_hash(target, data)
    monkeypatch.setattr("distill.toyworld.build.world_name", lambda size: f"{size}-another-build")
    assert config_hash(target, data) != before  # another config or corpus: distilled again, not reused
