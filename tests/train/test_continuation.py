"""Training continues (trainer.continue_from): more steps, more distilled answers, or both, from the earlier run's
checkpoint, published as the drafter's next version; a wsd continuation ends with one uninterrupted run's weights."""

import json

import pytest
import torch
from safetensors.torch import load_file

from distill.stage.shards import load_distilled
from tests.cli_runs import run_app, run_push

RUN = [
    "recipe=toy",
    "target=micro",
    "data.max_prompts=8",
    "data.shard_size=4",
    "data.sampling.max_new_tokens=16",
    "trainer.batch_size=4",
    "trainer.warmup_steps=1",
    "trainer.save_every=100",
    "trainer.log_every=1",
    "trainer.schedule=wsd",
    "trainer.decay_share=0.5",
    "eval.num_prompts=1",
    "eval.warmup_prompts=0",
    "eval.max_new_tokens=4",
    "eval.gamma_sweep=[]",
    "publish.verify_prompts=0",
    "publish.min_tau=1.0",
    "publish.model_name=toy-continued",
]


def _run(run_dir, *extra, stages="[distill,train]"):
    code, out, err = run_app("train", [*RUN, f"stages={stages}", f"run_dir={run_dir}", *extra])
    assert code == 0, err[-3000:]
    return out


def _weights(run_dir):
    return load_file(str(run_dir / "checkpoints" / "final" / "model.safetensors"))


def _log(run_dir):
    return [json.loads(line) for line in (run_dir / "checkpoints" / "log.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def first(tmp_path_factory, micro_world):
    """Six wsd steps (its decay begins after step 3), evaluated and published as version 1."""
    root = tmp_path_factory.mktemp("continuation")
    _run(root / "first", "trainer.max_steps=6", f"publish.hub_dir={root}/hub", stages="[distill,train,eval,publish]")
    return root


def test_more_steps_end_with_the_weights_of_one_uninterrupted_run_and_publish_the_next_version(first):
    out = _run(
        first / "longer",
        "trainer.max_steps=10",
        f"trainer.continue_from={first / 'first'}",
        f"publish.hub_dir={first}/hub",
        stages="[distill,train,eval,publish]",
    )
    assert "[distill] reusing the answers of" in out and "continuing" in out and "from its step 3" in out
    _run(first / "straight", "trainer.max_steps=10")
    longer, straight = _weights(first / "longer"), _weights(first / "straight")
    assert longer.keys() == straight.keys()
    for k in straight:
        torch.testing.assert_close(longer[k], straight[k], rtol=0, atol=0, msg=k)
    assert any(not torch.equal(longer[k], _weights(first / "first")[k]) for k in longer)  # it trained further
    assert [r["step"] for r in _log(first / "longer")] == list(range(1, 11))  # the loss curve spans both runs
    assert [r["loss"] for r in _log(first / "longer")] == [r["loss"] for r in _log(first / "straight")]
    # the earlier run is left as it was: its final weights, its checkpoint kept at the decay's start
    assert (first / "first" / "checkpoints" / "step-0000003").is_dir()

    rows = json.loads((first / "hub" / "index.json").read_text())["drafters"]
    v1, v2 = sorted((r for r in rows if r["model_name"] == "toy-continued"), key=lambda r: r["version"])
    assert (v1["version"], v2["version"]) == (1, 2)
    assert v2["continues"].endswith(v1["path"]) and v1["continues"] is None
    assert (v1["training_steps"], v2["training_steps"]) == (6, 10)
    assert v1["tau"] >= 1.0 and v2["tau"] >= 1.0  # each version keeps its own figures
    code, listing, _ = run_push(["--list", "--hub-dir", first / "hub"])
    assert code == 0 and f"continues {'/'.join(v1['path'].split('/')[-2:])}" in listing


def test_more_prompts_keep_the_earlier_answers_and_distil_only_the_new_ones(first):
    out = _run(
        first / "more_data",
        "trainer.max_steps=6",
        "data.max_prompts=12",
        f"trainer.continue_from={first / 'first'}",
    )
    assert "[distill] keeping the 8 answers of" in out
    before, after = load_distilled(first / "first" / "data"), load_distilled(first / "more_data" / "data")
    assert len(after) > len(before) and after.select(range(len(before)))["input_ids"] == before["input_ids"]
    log = _log(first / "more_data")
    assert [r["step"] for r in log] == list(range(1, 7)) and log[:3] == _log(first / "first")[:3]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["trainer.max_steps=10", "trainer.lr=1e-3"], "was trained with other settings (trainer.lr)"),
        (["trainer.max_steps=4"], "a continuation raises trainer.max_steps above 6"),
        (["trainer.max_steps=6"], "a continuation raises trainer.max_steps above 6"),
        (["trainer.max_steps=10", "trainer.resume=false"], "drop trainer.resume=false"),
    ],
)
def test_a_continuation_that_cannot_continue_is_one_line_before_any_work(first, tmp_path, extra, message):
    code, _, err = run_app(
        "train", [*RUN, f"run_dir={tmp_path / 'run'}", f"trainer.continue_from={first / 'first'}", *extra]
    )
    assert code != 0 and message in err.strip().splitlines()[-1]
    assert not (tmp_path / "run").exists()  # nothing written


def test_a_directory_without_training_is_refused(tmp_path, micro_world):
    code, _, err = run_app("train", [*RUN, f"trainer.continue_from={tmp_path}", "trainer.max_steps=10"])
    assert code != 0 and "holds no training run with checkpoints" in err.strip().splitlines()[-1]


EAGLE = [
    "recipe=toy_eagle",
    "drafter.layer_ids=[0,1,2]",
    "drafter.draft_vocab_size=300",
    "drafter.features=offline",
    "drafter.select_samples=4",
]


def test_eagle3_continues_exactly_over_its_draft_vocabulary_and_keeps_it_with_more_data(tmp_path, micro_world):
    """Offline features, the held-out pick and the draft vocabulary: a continued EAGLE-3 is still one run, and more
    data, whose token counts would choose another vocabulary, keeps the one its weights were trained over."""
    _run(tmp_path / "first", *EAGLE, "trainer.max_steps=6")
    _run(tmp_path / "longer", *EAGLE, "trainer.max_steps=8", f"trainer.continue_from={tmp_path / 'first'}")
    _run(tmp_path / "straight", *EAGLE, "trainer.max_steps=8")
    longer, straight = _weights(tmp_path / "longer"), _weights(tmp_path / "straight")
    for k in straight:
        torch.testing.assert_close(longer[k], straight[k], rtol=0, atol=0, msg=k)

    more = [*EAGLE, "data.max_prompts=16", f"trainer.continue_from={tmp_path / 'first'}", "trainer.max_steps=6"]
    _run(tmp_path / "more", *more)
    _run(tmp_path / "fresh", *EAGLE, "data.max_prompts=16", "trainer.max_steps=6")
    d2t = {name: _weights(tmp_path / name)["d2t"] for name in ("first", "more", "fresh")}
    assert torch.equal(d2t["more"], d2t["first"]) and not torch.equal(d2t["fresh"], d2t["first"])
