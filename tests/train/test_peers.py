"""The peer-trainer harness (issue 72): drafthub's samples in speculators' offline layout, read back by speculators'
own dataset class as the very features and soft targets drafthub trains on, and a speculators-trained export measured
by our engine, losslessly. (The trainers side by side at SmolLM2 scale: scripts/bench_peer_trainers.py.)"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from distill.features.capture import layer_features
from eval.config import EvalConfig
from eval.proposers import load_proposer
from eval.run import evaluate
from heads.families import read_export
from heads.vocab import build_draft_vocab, token_counts
from train.peers.speculators_data import write_speculators_data
from train.peers.speculators_run import PeerSettings, epochs_for, run_speculators, speculators_args

pytest.importorskip("speculators.train.data", reason="speculators 0.9.0 is installed by the README's test command")
LAYERS = [0, 1, 2]  # the micro target has 2 layers: id 2 is the last one's output before the final norm


@pytest.fixture(scope="module")
def rows(target, prompt_ids, tokenizer):
    """Prompts with the target's own greedy answers, the answers trained on (as drafthub distils them)."""
    out = []
    for prompt in prompt_ids[:4]:
        ids = target.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False)[0].tolist()
        out.append({"input_ids": ids, "loss_mask": [0] * len(prompt) + [1] * (len(ids) - len(prompt))})
    return out


@pytest.fixture(scope="module")
def written(tmp_path_factory, target, rows):
    vocab, _ = build_draft_vocab(token_counts([r["input_ids"] for r in rows], [r["loss_mask"] for r in rows], 512), 64)
    out = tmp_path_factory.mktemp("speculators_data")
    return out, vocab, write_speculators_data(target, rows, out, LAYERS, vocab, dtype=torch.float32)


@pytest.mark.needs_peers
def test_speculators_reads_our_samples_as_the_features_and_soft_targets_drafthub_trains_on(target, rows, written):
    from speculators.train.data import ArrowDataset

    out, vocab, manifest = written
    assert manifest["rows"] == len(rows) and manifest["layer_ids"] == [*LAYERS, 2]
    data = ArrowDataset(64, out, on_missing="raise", hidden_states_dtype=torch.float32)
    assert len(data) == len(rows)
    for i, row in enumerate(rows):
        item = data[i]  # a SampleUnavailable, not a dict, where token_ids and input_ids disagree
        ids = torch.tensor([row["input_ids"]])
        assert item["input_ids"].tolist() == row["input_ids"] and item["loss_mask"].tolist() == row["loss_mask"]
        features, logits = layer_features(target, ids, None, LAYERS)
        torch.testing.assert_close(item["hidden_states"], features[0])
        # its soft targets are the target's own logits: the last slot is the state before the final norm
        head = target.lm_head(target.model.norm(item["verifier_last_hidden_states"]))
        torch.testing.assert_close(head, logits[0], atol=1e-4, rtol=1e-4)
    d2t = torch.from_numpy(np.load(out / f"d2t-{vocab.size}.npy"))
    assert torch.equal(d2t + torch.arange(vocab.size), vocab.draft_to_target)  # target = draft + d2t[draft]


@pytest.mark.slow
def test_a_speculators_trained_eagle3_is_measured_by_our_engine_losslessly(
    tmp_path, target, micro_world, tokenizer, prompt_ids, rows, written
):
    from heads.formats.speculators import load_speculators

    out, vocab, _ = written
    settings = PeerSettings(
        LAYERS, vocab.size, 2, 0.8, lr=1e-3, warmup_steps=1, weight_decay=0.0, max_steps=5, tokens_per_step=96
    )
    epochs = epochs_for([len(r["input_ids"]) for r in rows[:3]], 96, settings.max_steps, settings.seed)
    assert epochs == 2  # 3 rows of ~70 tokens, 96 a step: a row a step, 3 steps an epoch
    args = speculators_args(out, micro_world.target_dir, tmp_path / "save", settings, 0.75, epochs)  # 3 rows train
    export = run_speculators(args, tmp_path / "speculators.log")
    # exactly max_steps: the epochs its packing needs, none more (each later epoch would add a step)
    assert json.loads((export / "training_state.json").read_text())["global_step"] == settings.max_steps
    config = json.loads((export / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3" and config["draft_vocab_size"] == vocab.size
    assert config["eagle_aux_hidden_state_layer_ids"] == LAYERS
    drafter = load_speculators(export, target)
    assert torch.equal(drafter.d2t, vocab.d2t())  # the vocabulary it was given, not one of its own
    cfg = EvalConfig(num_prompts=2, max_new_tokens=12, num_speculative_tokens=2, gamma_sweep=[], warmup_prompts=0)
    proposer, kind = load_proposer(
        read_export(export), target, len(tokenizer), cfg, torch.device("cpu")
    )  # as python -m eval does
    assert kind == "eagle3"
    report = evaluate(
        target, proposer, prompt_ids[4:], cfg, {tokenizer.eos_token_id}, len(tokenizer), {}, progress=False
    )
    assert report["lossless"] and report["lossless_prompts"] == 2


@pytest.mark.slow
def test_a_modelopt_trained_eagle3_is_measured_by_our_engine_losslessly(
    tmp_path, target, micro_world, tokenizer, prompt_ids, rows, written
):
    """ModelOpt's own EAGLE-3 (its model, loss and exporter) trained on our batches and feature store, its export put
    in the speculators layout: our loader reads ModelOpt's weights, and our engine decodes with them losslessly."""
    pytest.importorskip("modelopt.torch.speculative", reason="ModelOpt 0.47.0: pip install --no-deps (README)")
    from datasets import Dataset
    from safetensors.torch import load_file

    from distill.features.store import FeatureStore, write_features
    from heads.config import Eagle3Config
    from heads.eagle import Eagle3Drafter
    from heads.formats.speculators import load_speculators, save_speculators
    from train.data import BatchOrder
    from train.peers.modelopt_run import as_speculators, train_modelopt

    _, vocab, _ = written
    dataset = Dataset.from_dict({k: [r[k] for r in rows] for k in ("input_ids", "loss_mask")})
    write_features(target, dataset, tmp_path / "store", LAYERS)
    settings = PeerSettings(
        LAYERS, vocab.size, 2, 0.8, lr=1e-3, warmup_steps=1, weight_decay=0.0, max_steps=3, tokens_per_step=96
    )
    order = BatchOrder(dataset, 2, 512, tokenizer.pad_token_id, seed=0)
    store = FeatureStore(tmp_path / "store")
    export, seconds = train_modelopt(micro_world.target_dir, store, order, settings, vocab.d2t(), tmp_path)
    logged = [json.loads(line) for line in (tmp_path / "modelopt.log").read_text().splitlines()]
    assert [r["step"] for r in logged] == [1, 2, 3] and seconds > 0
    assert json.loads((export / "config.json").read_text())["architectures"] == ["LlamaForCausalLMEagle3"]

    ours = Eagle3Drafter.from_target(Eagle3Config(layer_ids=LAYERS, draft_vocab_size=vocab.size), target, vocab)
    save_speculators(ours, tmp_path / "template", {"name_or_path": str(micro_world.target_dir)}, 2)
    served = as_speculators(export, tmp_path / "template", tmp_path / "layout")
    drafter = load_speculators(served, target)
    theirs = load_file(str(export / "model.safetensors"))
    torch.testing.assert_close(drafter.fc.weight, theirs["fc.weight"].float())  # ModelOpt's weights, not the template's
    assert torch.equal(drafter.d2t, vocab.d2t())
    cfg = EvalConfig(num_prompts=2, max_new_tokens=12, num_speculative_tokens=2, gamma_sweep=[], warmup_prompts=0)
    proposer, kind = load_proposer(read_export(served), target, len(tokenizer), cfg, torch.device("cpu"))
    report = evaluate(
        target, proposer, prompt_ids[4:], cfg, {tokenizer.eos_token_id}, len(tokenizer), {}, progress=False
    )
    assert kind == "eagle3" and report["lossless"] and report["lossless_prompts"] == 2
