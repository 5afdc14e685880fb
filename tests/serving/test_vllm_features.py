"""drafter.features=vllm: vLLM (extract_hidden_states) writes the feature shards a transformers forward writes."""

import json
import shutil

import pytest
import torch

import distill.features.vllm as vllm_features
from distill.config import TargetConfig
from distill.features.store import FeatureStore, write_features
from distill.stage.shards import load_distilled
from distill.targets.heads import load_target_heads
from tests.cli_runs import run_app

pytestmark = pytest.mark.needs_vllm
TARGET = TargetConfig(name_or_path="toyworld:micro")
IDS = [0, 1, 2]  # id 2 = N: the last layer's output before the final norm


def _train(run_dir, *overrides, data=None):
    """`python -m train` (distil and train); with `data`, a copy of that distilled dataset is used."""
    if data is not None:
        shutil.copytree(data, run_dir / "data")
    args = [
        "recipe=toy",
        "target=micro",
        "drafter=eagle3",
        "drafter.layer_ids=[0,1,2]",
        "drafter.select_samples=0",
        "data.max_prompts=16",
        "data.sampling.max_new_tokens=24",
        "trainer.max_steps=6",
        "trainer.batch_size=8",
        "trainer.warmup_steps=2",
        "trainer.log_every=1",
        "trainer.lr=1e-2",
        "trainer.max_seq_len=160",
        "trainer.max_cut_share=1",  # a short cap keeps the test fast: the answer tails it cuts are accepted
        "stages=[distill,train]",
        f"run_dir={run_dir}",
        *overrides,
    ]
    code, _, err = run_app("train", args)  # in-process, as `python -m train` runs (tests/cli_runs.py)
    assert code == 0, err[-3000:]
    log = (run_dir / "checkpoints" / "log.jsonl").read_text().splitlines()
    summary = json.loads((run_dir / "checkpoints" / "final" / "train_summary.json").read_text())
    return [json.loads(line)["loss"] for line in log], summary["target"]


def test_eagle3_trains_on_vllm_features_equal_to_transformers_features(
    tmp_path, target, monkeypatch, vllm_own_processes
):
    """The distill stage writes the features with vLLM: they equal a transformers forward's within bf16; training
    loads only the target's embeddings, final norm and lm_head and follows the loss curve of online training.
    vLLM in its own processes: the hidden-states connector writes a request's file on the engine's next step, which
    an in-process engine core (tests/vllm_host.py) takes only while `generate` runs, so the last file never comes."""
    online, whole = _train(tmp_path / "online")
    served, heads = _train(tmp_path / "vllm", "drafter.features=vllm", data=tmp_path / "online" / "data")
    assert served == pytest.approx(online, rel=1e-2)  # bf16 storage is the only difference
    assert heads["sharding"] == "heads only" and heads["bytes"] == whole["bytes"]
    assert heads["bytes_per_process"] < whole["bytes"] / 3  # no decoder layer was loaded

    (store,) = [p.parent for p in (tmp_path / "vllm" / "data" / "features").glob("*/manifest.json")]
    dataset = load_distilled(tmp_path / "vllm" / "data")
    hf = write_features(target, dataset, tmp_path / "hf", IDS)
    assert json.loads((store / "manifest.json").read_text()) == hf  # layer ids, sizes, shards
    rows, width = list(range(len(dataset))), max(map(len, dataset["input_ids"]))
    (f_hf, last_hf), (f_vllm, last_vllm) = (FeatureStore(d).batch(rows, width) for d in (tmp_path / "hf", store))
    # both are float32 forwards rounded to bf16: they differ by at most one bf16 step (2⁻⁸ relative)
    assert torch.allclose(f_vllm, f_hf, rtol=2**-7, atol=1e-2), (f_vllm - f_hf).abs().max()
    assert torch.allclose(last_vllm, last_hf, rtol=2**-7, atol=1e-2), (last_vllm - last_hf).abs().max()
    assert not (store / ".vllm").exists()  # vLLM's per-request files are gone

    def no_engine(*args, **kwargs):
        raise AssertionError("a complete store must not start vLLM")

    monkeypatch.setattr(vllm_features, "_Extractor", no_engine)
    assert vllm_features.write_vllm_features(TARGET, load_target_heads(TARGET), dataset, store, IDS) == hf
