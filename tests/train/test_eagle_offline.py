"""Offline EAGLE features: same first-step loss as online, resumable shards, disk checked up front."""

import pytest
import torch

from distill.config import DataConfig, SamplingConfig, TargetConfig
from distill.errors import DistillError
from distill.features.store import FeatureStore, bytes_needed, write_features
from distill.stage.run import distill
from distill.stage.shards import load_distilled
from heads.config import Eagle1Config, Eagle3Config
from heads.eagle import Eagle3Drafter
from heads.vocab import build_draft_vocab, token_counts
from train.data import BatchOrder
from train.setups.eagle3 import Eagle3TrainingTimeTest

IDS = [0, 1, 2]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, micro_world):
    out = tmp_path_factory.mktemp("data")
    distill(
        TargetConfig(name_or_path="toyworld:micro"),
        DataConfig(max_prompts=12, batch_size=6, shard_size=12, sampling=SamplingConfig(max_new_tokens=16)),
        out,
        "cpu",
    )
    return load_distilled(out)


def test_offline_features_give_the_online_first_step_loss(tmp_path, dataset, target, tokenizer, capsys):
    vocab, _ = build_draft_vocab(
        token_counts(dataset["input_ids"], dataset["loss_mask"], target.config.vocab_size), 200
    )
    torch.manual_seed(0)
    drafter = Eagle3Drafter.from_target(Eagle3Config(layer_ids=IDS), target, vocab)
    batch = BatchOrder(dataset, 4, 512, tokenizer.pad_token_id, seed=0).batch(0)
    online, online_metrics = Eagle3TrainingTimeTest(target, IDS, vocab.draft_to_target, ttt_steps=3)(drafter, batch)

    manifest = write_features(target, dataset, tmp_path / "f", IDS, batch_size=5, shard_size=5)
    H = target.config.hidden_size
    assert (
        manifest["bytes"] == bytes_needed(sum(map(len, dataset["input_ids"])), 3, H)
        and manifest["bytes_per_token"] == 4 * H * 2
    )
    assert "offline features:" in capsys.readouterr().out  # the disk needed is printed before writing
    objective = Eagle3TrainingTimeTest(
        target, IDS, vocab.draft_to_target, ttt_steps=3, store=FeatureStore(tmp_path / "f")
    )
    offline, metrics = objective(drafter, batch)  # the lm_head's draft-vocabulary rows; each row's argmax computed
    torch.testing.assert_close(offline, online, rtol=2e-2, atol=2e-2)  # bf16 storage is the only difference
    for step in range(3):
        assert abs(metrics[f"step{step}_acc"] - online_metrics[f"step{step}_acc"]) < 0.05
    again, metrics_again = objective(drafter, batch)  # every row's whole-vocabulary argmax now kept from the first
    assert torch.equal(again, offline) and all(torch.equal(metrics_again[k], metrics[k]) for k in metrics)


def test_feature_shards_resume_and_a_full_disk_is_refused(tmp_path, dataset, target):
    root = tmp_path / "f"
    write_features(target, dataset, root, IDS, shard_size=5)
    shards = sorted(root.glob("shard-*.safetensors"))
    assert len(shards) == 3
    kept = shards[0].stat().st_mtime_ns
    shards[-1].unlink()  # a run killed before its last shard
    write_features(target, dataset, root, IDS, shard_size=5)
    assert shards[-1].exists() and shards[0].stat().st_mtime_ns == kept  # only the missing shard was written
    full = tmp_path / "full"
    with pytest.raises(DistillError, match="offline features need .* GiB more but .* free"):
        write_features(target, dataset, full, IDS, shard_size=5, free_bytes=1000)
    assert not full.exists()  # refused before anything was created


def test_eagle1_offline_features_give_the_online_first_step_loss(tmp_path, dataset, target, tokenizer):
    from heads.eagle1 import Eagle1Drafter
    from train.setups.eagle1 import Eagle1Distillation

    torch.manual_seed(0)
    drafter = Eagle1Drafter.from_target(Eagle1Config(), target)
    batch = BatchOrder(dataset, 4, 512, tokenizer.pad_token_id, seed=0).batch(0)
    online, _ = Eagle1Distillation(target, len(tokenizer), feature_noise=0.0)(drafter, batch)
    manifest = write_features(target, dataset, tmp_path / "f", [], shard_size=5)
    assert manifest["bytes_per_token"] == target.config.hidden_size * 2  # only the lm_head input
    offline, _ = Eagle1Distillation(target, len(tokenizer), feature_noise=0.0, store=FeatureStore(tmp_path / "f"))(
        drafter, batch
    )
    torch.testing.assert_close(offline, online, rtol=2e-2, atol=2e-2)


def test_hard_labels_on_greedy_answers_are_the_top_1_soft_targets(tmp_path, target, tokenizer):
    """loss=ce learns the sampled tokens; on the target's own greedy answers each is the target's argmax, so with a
    draft vocabulary of every token it is exactly the soft loss cut to the top 1 (trainer.kd_top_k=1), while the
    top-V cut is the whole soft loss and a top-2 cut is neither."""
    data = DataConfig(max_prompts=8, batch_size=8, shard_size=8, sampling=SamplingConfig(max_new_tokens=16))
    data.sampling.temperature = 0.0
    distill(TargetConfig(name_or_path="toyworld:micro"), data, tmp_path / "greedy", "cpu")
    greedy = load_distilled(tmp_path / "greedy")
    V = target.config.vocab_size
    vocab, _ = build_draft_vocab(token_counts(greedy["input_ids"], greedy["loss_mask"], V), V)
    torch.manual_seed(0)
    drafter = Eagle3Drafter.from_target(Eagle3Config(layer_ids=IDS), target, vocab)
    batch = BatchOrder(greedy, 8, 512, tokenizer.pad_token_id, seed=0).batch(0)

    def loss(**kw):
        with torch.no_grad():  # the losses' values are compared, nothing is trained
            return Eagle3TrainingTimeTest(target, IDS, vocab.draft_to_target, ttt_steps=2, **kw)(drafter, batch)[0]

    soft, hard, top1 = loss(), loss(loss="ce"), loss(top_k=1)
    torch.testing.assert_close(hard, top1, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(loss(top_k=V), soft, rtol=1e-6, atol=1e-6)
    assert abs(float(loss(top_k=2)) - float(soft)) > 1e-3 and abs(float(loss(top_k=2)) - float(hard)) > 1e-3


def test_the_whole_vocabularys_argmax_is_made_a_chunk_of_positions_at_a_time(target, monkeypatch):
    """A 262k-vocabulary target's logits for a whole batch are gigabytes: the argmax the loss reads is the same made
    LOGITS_CHUNK positions at a time, and no call of the lm_head sees more."""
    import torch

    import train.setups.base as base

    monkeypatch.setattr(base, "LOGITS_CHUNK", 7)
    hidden = torch.randn(30, target.config.hidden_size)
    lm_head = target.get_output_embeddings()
    widest = []
    hook = lm_head.register_forward_pre_hook(lambda module, args: widest.append(args[0].shape[0]))
    try:
        chunked = base.stored_argmax(target, hidden)
    finally:
        hook.remove()
    assert torch.equal(chunked, lm_head(hidden).argmax(-1)) and max(widest) == 7 and len(widest) == 5
    assert base.stored_argmax(target, hidden[:0]).shape == (0,)
