"""The layer-skip search: greedy rounds on the predicted speed-up, and the recipe end to end on the micro world."""

import json

import pytest

import train.setups.layer_skip as search
from eval.metrics import predicted_speedup
from tests.test_cli import run


class _EightLayers:
    """Stands in for a target: the search only counts its layers (agreement and cost are scripted)."""

    def __init__(self):
        import torch

        self.model = type("M", (), {"layers": torch.nn.ModuleList(torch.nn.Identity() for _ in range(8))})()

    def __call__(self, **kwargs):
        raise AssertionError("scripted: no forward expected")


def test_greedy_rounds_add_the_layer_with_the_best_predicted_speedup_and_stop_when_none_pays(monkeypatch):
    # Layers 3 and 5 are nearly free to skip, 6 costs a little, the rest a lot; cost ∝ layers run.
    loss = {3: 0.01, 5: 0.02, 6: 0.03}
    monkeypatch.setattr(search, "greedy_agreement", lambda t, b, skip, ref: 0.95 - sum(loss.get(i, 0.3) for i in skip))
    monkeypatch.setattr(search, "decode_seconds", lambda t, skip: 0.1 + (8 - len(skip)))
    monkeypatch.setattr(search, "_logits", lambda model, batch: None)
    result = search.search_skip_layers(_EightLayers(), [], num_speculative_tokens=4, max_evaluations=100)

    def predicted(skip):
        return predicted_speedup(0.95 - sum(loss.get(i, 0.3) for i in skip), 4, (0.1 + 8 - len(skip)) / 8.1)

    # round 4: every remaining layer costs the same, so the lowest index (0) is the round's pick
    assert [c.skipped_layers for c in result.trajectory] == [[3], [3, 5], [3, 5, 6], [0, 3, 5, 6]]
    assert predicted([3, 5, 6]) > predicted([3, 5]) > predicted([3]) and predicted([0, 3, 5, 6]) < predicted([3, 5, 6])
    assert result.best.skipped_layers == [3, 5, 6]  # the fourth round no longer paid: stop there
    assert result.best.predicted_speedup == pytest.approx(predicted([3, 5, 6]))
    assert result.evaluations == 8 + 7 + 6 + 5
    assert result.summary()["skipped_layers"] == [3, 5, 6]


def test_the_evaluation_budget_caps_the_search(monkeypatch):
    monkeypatch.setattr(search, "greedy_agreement", lambda t, b, skip, ref: 0.9 - 0.01 * len(skip))
    monkeypatch.setattr(search, "decode_seconds", lambda t, skip: 8 - len(skip))
    monkeypatch.setattr(search, "_logits", lambda model, batch: None)
    result = search.search_skip_layers(_EightLayers(), [], num_speculative_tokens=4, max_evaluations=10)
    assert result.evaluations == 10 and len(result.best.skipped_layers) == 2  # 8 sets, then 2 of the second round


@pytest.mark.slow
def test_toy_layer_skip_recipe_searches_evaluates_and_exports(tmp_path, micro_world):
    small = [
        "target=micro",
        "data.max_prompts=24",
        "data.sampling.max_new_tokens=16",
        "eval.num_prompts=3",
    ]
    common = [*small, "eval.max_new_tokens=12", "eval.gamma_sweep=[]", "drafter.search_samples=8"]
    r = run("train", "recipe=toy_layer_skip", *common, "stages=[distill,train,eval]", f"run_dir={tmp_path}/run")
    assert r.returncode == 0, r.stderr[-2000:]
    run_dir = tmp_path / "run"
    summary = json.loads((run_dir / "checkpoints" / "final" / "train_summary.json").read_text())
    found = summary["layer_skip_search"]
    assert found["skipped_layers"] in ([0], [1]) and found["evaluations"] == 2  # the micro target has 2 layers
    assert summary["optimizer_steps"] == 0 and summary["seconds"] >= found["search_seconds"]
    config = json.loads((run_dir / "drafter" / "config.json").read_text())
    assert config["drafthub_layer_skip"]["skipped_layers"] == found["skipped_layers"]
    report = json.loads((run_dir / "eval" / "eval_report.json").read_text())
    assert report["kind"] == "layer_skip" and report["lossless"] is True
    # Skipping every layer is refused before any work, in one line naming the fix.
    bad = run("train", "recipe=toy_layer_skip", *small, "drafter.skip_layers=[0,1]", f"run_dir={tmp_path}/bad")
    assert bad.returncode != 0 and "skips every one of the target's 2 layers" in bad.stderr
    assert not (tmp_path / "bad").exists()
