"""distill.targets.heads: the target's embeddings, final norm and lm_head read by name, without its layers."""

from types import SimpleNamespace

import pytest
import torch

from distill.config import TargetConfig
from distill.targets.heads import final_norm, load_target_heads
from train.errors import PipelineError
from train.setups.base import offline_features


def test_heads_read_from_a_sharded_checkpoint_equal_the_whole_target(tmp_path, target):
    """An index and several files, as a hub target has: only the tensors asked for are read, and they are exact."""
    target.save_pretrained(tmp_path / "t", max_shard_size="20KB")
    assert (tmp_path / "t" / "model.safetensors.index.json").exists()
    assert len(list((tmp_path / "t").glob("model-*.safetensors"))) > 2
    heads = load_target_heads(TargetConfig(name_or_path=str(tmp_path / "t")))
    for get in (lambda m: m.get_input_embeddings(), final_norm, lambda m: m.get_output_embeddings()):
        assert torch.equal(get(heads).weight, get(target).weight)
    assert (heads.get_output_embeddings().weight is heads.get_input_embeddings().weight) == (
        target.get_output_embeddings().weight is target.get_input_embeddings().weight
    )
    assert all(p.is_meta for p in heads.get_decoder().layers.parameters())  # no decoder layer was loaded
    with pytest.raises(NotImplementedError):
        heads(input_ids=torch.tensor([[1, 2]]))


def test_features_from_vllm_are_not_started_beside_training_processes(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    cfg = SimpleNamespace(drafter=SimpleNamespace(features="vllm"), target=SimpleNamespace(name_or_path="t"))
    ctx = SimpleNamespace(cfg=cfg, paths=SimpleNamespace(data=tmp_path), barrier=lambda: None, rank=0)
    with pytest.raises(PipelineError, match=r"run `python -m train … stages=\[distill\]` alone first"):
        offline_features(ctx, [0, 1, 2])
    assert not (tmp_path / "features").exists()
