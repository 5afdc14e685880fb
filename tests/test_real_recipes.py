"""Every shipped real recipe, end to end on its model's stand-in (tests/standins.py), as a user runs it on their
own model: `python -m train recipe=NAME` with only paths and sizes overridden, on prompt sets in the formats the
recipes load (ShareGPT JSON with from/value, UltraChat's parquet repo layout with its train_sft split, a saved
DatasetDict with train/test only), through distill → train → eval (+ vLLM's served check where the recipe asks
for it) → publish to a local registry.

What is overridden and why: paths (target, prompts, run and registry directories), sizes (prompt and step counts,
lengths, layer ids and token ids that must exist in a 2-layer stand-in), `target.dtype=float32` (the CPU),
`trainer.lr` for EAGLE-3 and `publish.min_tau` (a random stand-in target is no Llama: its answers are near-random
text, so τ stays near 1 and the recipes' bars, set for the real models, do not apply) and
`eval.vllm.speed_repeats=0` (the served acceptance check runs; the served speed-up, a second engine, does not).
These prove the pipeline on the real formats and quirks; drafter quality is measured on the toy world.
"""

from __future__ import annotations

import json
import random

import pytest

from tests.cli_runs import run_app

pytestmark = pytest.mark.slow

WORDS = (
    "python list sort key value cache token draft model verify accept reject sample greedy layer head train "
    "prompt answer data set file read write loop index slice tuple string number print return yield class"
).split()


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


@pytest.fixture(scope="module")
def prompt_sets(tmp_path_factory):
    """The recipes' data formats, built here: ShareGPT JSON, UltraChat's parquet layout, a train/test DatasetDict."""
    import datasets

    root, rng = tmp_path_factory.mktemp("real-data"), random.Random(0)
    sharegpt = [
        {
            "id": f"sg{i}",
            "conversations": [
                {"from": "human", "value": f"Explain {_text(rng, 8)}"},
                {"from": "gpt", "value": _text(rng, 20)},
            ],
        }
        for i in range(80)
    ]
    sharegpt[10]["conversations"] = []  # as in the real dumps: rows with no turns (dropped and counted)
    sharegpt[20]["conversations"].insert(0, {"from": "system", "value": "You are a helpful assistant."})
    (root / "sharegpt.json").write_text(json.dumps(sharegpt))
    ultrachat = root / "ultrachat_200k"
    (ultrachat / "data").mkdir(parents=True)
    (ultrachat / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n"
        "  - split: train_sft\n    path: data/train_sft-*\n  - split: test_sft\n    path: data/test_sft-*\n---\n"
    )
    for split, count in (("train_sft", 40), ("test_sft", 10)):
        rows = []
        for i in range(count):
            prompt = f"Write about {_text(rng, 6)}"
            messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": _text(rng, 15)}]
            rows.append({"prompt": prompt, "prompt_id": f"{split}{i}", "messages": messages})
        datasets.Dataset.from_list(rows).to_parquet(str(ultrachat / "data" / f"{split}-00000-of-00001.parquet"))
    train_test = root / "train_test"
    rows = lambda n: [{"messages": [{"role": "user", "content": f"Summarise {_text(rng, 7)}"}]} for _ in range(n)]  # noqa: E731
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows(60)), "test": datasets.Dataset.from_list(rows(12))}
    ).save_to_disk(str(train_test))
    return root


SIZES = [
    "target.dtype=float32",
    "data.max_prompts=24",
    "data.holdout=4",
    "data.max_prompt_tokens=128",
    "data.batch_size=8",
    "data.shard_size=32",
    "data.sampling.max_new_tokens=24",
    "trainer.max_steps=16",
    "trainer.warmup_steps=4",
    "trainer.batch_size=8",
    "trainer.grad_accum=1",
    "trainer.max_seq_len=192",
    "trainer.save_every=16",
    "eval.num_prompts=3",
    "eval.warmup_prompts=1",
    "eval.max_new_tokens=16",
    "eval.vllm.speed_repeats=0",
    "publish.min_tau=1.0",  # a random stand-in is no Llama: its τ says the stages ran, not how good a drafter is
    "publish.verify_prompts=1",
]
MIX = ["data.mix.0.max_prompts=8"]


def _recipe_args(name: str, standin, data, tmp_path) -> list[str]:
    llama3 = standin("llama3")
    ultrachat = [f"data.mix.0.prompts={data / 'ultrachat_200k'}", *MIX]
    sharegpt = f"data.prompts={data / 'sharegpt.json'}"
    if name == "eagle_llama8b":  # vLLM answers the prompts (its CPU build), vLLM serves the export
        return [
            f"target.name_or_path={llama3.path}",
            sharegpt,
            *ultrachat,
            "drafter.layer_ids=[0,1,2]",
            "drafter.select_samples=8",
            "trainer.max_steps=40",  # some acceptance for the served check to compare: a random target learns
            "trainer.save_every=40",  # nothing at a real model's peak rate in 16 steps
            "trainer.lr=3e-3",
            "eval.gamma_sweep=[]",
            "eval.dynamic_tree.depth=3",
            "eval.dynamic_tree.top_k=3",
            "eval.dynamic_tree.total_tokens=8",
        ]
    if name == "pard_llama8b":
        return [
            f"target.name_or_path={llama3.path}",
            sharegpt,
            *ultrachat,
            "data.backend=hf",
            f"drafter.init={_small_llama3(llama3, tmp_path)}",
            f"drafter.pard_token={llama3.reserved_token_id}",
            "drafter.max_draft_tokens=4",
            "drafter.anchors_per_sequence=8",
            "eval.num_speculative_tokens=4",
            "eval.gamma_sweep=[]",
        ]
    if name == "dflash_llama8b":  # a saved DatasetDict with train/test only: eval measures its test split
        return [
            f"target.name_or_path={llama3.path}",
            f"data.prompts={data / 'train_test'}",
            "data.mix=[]",
            "data.backend=hf",
            "eval_split=test",
            "drafter.layer_ids=[1,2]",
            "drafter.num_hidden_layers=1",
            "drafter.block_size=4",
            f"drafter.mask_token_id={llama3.reserved_token_id}",
            "drafter.anchors_per_sequence=8",
            "eval.num_speculative_tokens=3",
            "eval.gamma_sweep=[]",
        ]
    if name == "dspark_qwen3_8b":  # Qwen3's quirks: its own chat template, two end tokens, tied embeddings
        qwen3 = standin("qwen3")
        return [
            f"target.name_or_path={qwen3.path}",
            sharegpt,
            *ultrachat,
            "data.backend=hf",
            "drafter.layer_ids=[1,2]",
            "drafter.num_hidden_layers=1",
            "drafter.block_size=4",
            "drafter.markov_rank=16",
            f"drafter.mask_token_id={qwen3.reserved_token_id}",
            "drafter.anchors_per_sequence=8",
            "eval.num_speculative_tokens=4",
            "eval.gamma_sweep=[]",
        ]
    if name == "medusa_vicuna7b":
        return [
            f"target.name_or_path={_vicuna(standin('mistral'), tmp_path)}",
            sharegpt,
            "drafter.num_heads=3",
            "drafter.holdout_samples=8",
            "drafter.tree_nodes=8",
            "eval.num_speculative_tokens=3",
            "eval.gamma_sweep=[]",
        ]
    raise KeyError(name)


def _small_llama3(llama3, tmp_path):
    """Llama-3.2-1B-Instruct's role: a smaller model of the same family, sharing the target's tokenizer."""
    from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM

    out = tmp_path / "llama3-small"
    config = AutoConfig.from_pretrained(llama3.path)
    config.num_hidden_layers = 1
    LlamaForCausalLM(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(llama3.path).save_pretrained(out)
    return out


def _vicuna(mistral, tmp_path):
    """Vicuna-7B v1.3's quirks: a Llama with the sentencepiece-style <unk>/<s>/</s> vocabulary, no pad token and
    no chat template (the recipe brings its own). The Mistral stand-in's tokenizer and weights, as a Llama."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = tmp_path / "vicuna"
    source = AutoModelForCausalLM.from_pretrained(mistral.path)
    fields = {k: v for k, v in source.config.to_dict().items() if k not in ("model_type", "architectures")}
    model = LlamaForCausalLM(LlamaConfig(**fields))
    model.load_state_dict(source.state_dict(), strict=False)
    model.save_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(mistral.path)
    tokenizer.chat_template = None
    tokenizer.save_pretrained(out)
    (out / "chat_template.jinja").unlink(missing_ok=True)
    return out


@pytest.mark.needs_vllm
@pytest.mark.parametrize(
    "recipe", ["eagle_llama8b", "pard_llama8b", "dflash_llama8b", "dspark_qwen3_8b", "medusa_vicuna7b"]
)
def test_a_shipped_recipe_runs_end_to_end_on_its_stand_in(recipe, standin, prompt_sets, tmp_path, monkeypatch):
    pytest.importorskip("vllm", reason="the recipes' served check and vLLM distillation need vLLM's CPU build")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DRAFTHUB_DFLASH_CPU_K_NORM", "1")  # vLLM 0.32's CPU k_norm bug (heads/formats/dflash_vllm_cpu)
    hub = tmp_path / "hub"
    argv = [
        f"recipe={recipe}",
        *SIZES,
        *_recipe_args(recipe, standin, prompt_sets, tmp_path),
        f"run_dir={tmp_path / 'run'}",
        f"publish.hub_dir={hub}",
    ]
    code, out, err = run_app("train", argv)
    assert code == 0, err[-3000:]
    report = json.loads((tmp_path / "run" / "eval" / "eval_report.json").read_text())
    assert report["lossless"] is True
    assert report["prompts"]["overlap"] == 0 and report["prompts"]["count"] >= 3
    assert report["tokenizer_matches_target"] in (True, None)
    if "served" in report:
        assert report["served"]["verdict"] != "broken", report["served"]
    index = json.loads((hub / "index.json").read_text())
    assert len(index["drafters"] if isinstance(index, dict) and "drafters" in index else index) >= 1
    print(f"{recipe}: tau {report['tau']:.3f}, served {report.get('served', {}).get('tau')}")


def test_eagle_llama70b_runs_its_two_step_launch_on_its_stand_in(standin, prompt_sets, tmp_path, monkeypatch):
    """The recipe's own flow: distil alone, then `accelerate launch --config_file conf/accelerate/zero3.yaml` trains
    with the frozen target sharded by ZeRO-3 (2 CPU processes for 8 GPUs) and evaluates and publishes."""
    pytest.importorskip(
        "deepspeed", reason="the recipe trains under DeepSpeed ZeRO-3 (pip install drafthub[deepspeed])"
    )
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    monkeypatch.chdir(tmp_path)
    llama3, run, hub = standin("llama3"), tmp_path / "run", tmp_path / "hub"
    args = [
        "recipe=eagle_llama70b",
        *SIZES,
        f"target.name_or_path={llama3.path}",
        f"data.prompts={prompt_sets / 'sharegpt.json'}",
        f"data.mix.0.prompts={prompt_sets / 'ultrachat_200k'}",
        *MIX,
        "data.backend=hf",
        "data.tensor_parallel_size=1",
        "drafter.layer_ids=[0,1,2]",
        "drafter.select_samples=8",
        "trainer.batch_size=2",
        "trainer.grad_accum=2",
        "eval.gamma_sweep=[]",
        "eval.dynamic_tree.depth=3",
        "eval.dynamic_tree.top_k=3",
        "eval.dynamic_tree.total_tokens=8",
        f"run_dir={run}",
        f"publish.hub_dir={hub}",
    ]
    code, _, err = run_app("train", [*args, "stages=[distill]"])
    assert code == 0, err[-2000:]
    launch = [
        "--config_file",
        str(REPO / "conf" / "accelerate" / "zero3.yaml"),
        "--num_processes",
        "2",
        "--mixed_precision",
        "no",
        "--main_process_port",
        "0",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env.pop("ACCELERATE_USE_CPU", None)  # it would turn the DeepSpeed launch into plain DDP
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        *launch,
        "-m",
        "train",
        *args,
        "stages=[train,eval,publish]",
    ]
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((run / "checkpoints" / "final" / "train_summary.json").read_text())
    assert summary["processes"] == 2 and summary["target"]["sharding"] == "zero3"
    report = json.loads((run / "eval" / "eval_report.json").read_text())
    assert report["lossless"] is True and report["prompts"]["overlap"] == 0
    assert report["served"]["verdict"] != "broken", report["served"]  # vLLM started from the launched main process
    assert (hub / "index.json").exists()
    print(f"eagle_llama70b: tau {report['tau']:.3f}, served {report['served'].get('tau')}")
