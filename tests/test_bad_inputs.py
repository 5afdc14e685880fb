"""Bad input through the real entry points: one `error:` line naming the fix, exit 2, nothing left behind.

The apps run in this process (tests/cli_runs.py) so that the whole table costs seconds; tests/test_cli.py
runs a few of the same through a fresh interpreter.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest
import torch

from distill.lock import exclusive
from heads.config import DSparkConfig
from heads.dspark import DSparkDrafter
from tests.cli_runs import run_app, run_push
from tests.exporting import export
from tests.gemma_gguf import write_gemma3_gguf
from tests.gguf_files import write_gguf

USER = {"messages": [{"role": "user", "content": "def add(a, b):"}]}


PROGRESS = re.compile(r"\d+/\d+ \[[^\]]*(it/s|s/it)\]")  # a tqdm bar (loading weights), not a message


def _app(name: str, argv: list[str], capsys) -> tuple[int, list[str]]:
    code, _, err = run_app(name, argv)
    return code, [line for line in err.replace("\r", "\n").splitlines() if line.strip() and not PROGRESS.search(line)]


def _push(argv: list[str], capsys) -> tuple[int, list[str]]:
    code, _, err = run_push(argv)
    return code, [line for line in err.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def files(tmp_path_factory, micro_world, weak_draft, target):
    """Inputs the cases point at: prompt files good and bad, drafter directories that are not drafters."""
    root = tmp_path_factory.mktemp("bad-inputs")
    torch.manual_seed(0)
    dspark = DSparkDrafter.from_target(DSparkConfig(layer_ids=[1, 2], block_size=4, markov_rank=8), target, 3)
    export(dspark, root / "dspark", verifier={"name_or_path": str(micro_world.target_dir)})
    (root / "ok.jsonl").write_text(json.dumps(USER) + "\n")
    long = {"messages": [{"role": "user", "content": "x = 1\n" * 2000}]}
    (root / "long.jsonl").write_text(json.dumps(long) + "\n")
    (root / "no-user.jsonl").write_text(json.dumps({"messages": [{"role": "system", "content": "be brief"}]}) + "\n")
    (root / "no-turns.jsonl").write_text(json.dumps({"category": "qa", "turns": []}) + "\n")  # Spec-Bench's layout
    (root / "stub-list.jsonl").write_text(json.dumps({"task_id": "HumanEval/0", "prompt": ["def f():"]}) + "\n")
    unsized = root / "unsized-drafter"
    unsized.mkdir()
    (unsized / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    medusa = root / "medusa-original"
    medusa.mkdir()
    (medusa / "config.json").write_text(json.dumps({"medusa_num_heads": 4, "medusa_num_layers": 1}))
    (root / "plain-dir").mkdir()
    write_gguf(micro_world.target_dir, root / "base.gguf", chat_template=False)  # a base model's GGUF
    write_gemma3_gguf(root / "gemma3.gguf")  # a Gemma-3-style target (tests/gemma_gguf.py)
    weak_draft.save_pretrained(root / "real-draft")
    weak_draft.save_pretrained(root / "edited-vocab")  # its config.json's vocab_size edited by hand
    config = json.loads((root / "edited-vocab" / "config.json").read_text())
    (root / "edited-vocab" / "config.json").write_text(json.dumps({**config, "vocab_size": config["vocab_size"] + 8}))
    drafter = root / "draft-config"  # a draft LM's config (sized): a loadable kind, so the target check is reached
    drafter.mkdir()
    (drafter / "config.json").write_text(
        json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 32, "vocab_size": 8})
    )
    return root


TRAIN = ["recipe=toy", "target=micro", "stages=[distill]"]

# (case, app, arguments ({f}: the files fixture, {t}: this case's temporary dir), expected text in the line)
CASES = [
    ("misspelt key", "train", ["trainer.learning_rate=0.1"], "trainer.learning_rate is not a setting (misspelt?)"),
    ("unknown top-level key", "train", ["foo=1"], "foo is not a setting (misspelt?); valid keys there: recipe_name"),
    ("unknown recipe", "train", ["recipe=nope"], "recipe=nope is not one of the recipe configs; choose from: "),
    ("unknown drafter group", "train", ["drafter=nope"], "drafter=nope is not one of the drafter configs"),
    ("wrong value type", "train", ["trainer.max_steps=abc"], "trainer.max_steps: Value 'abc' of type 'str'"),
    ("unknown stage", "train", ["stages=[evl]"], "unknown stage(s) ['evl']"),
    ("batch size 0", "train", [*TRAIN, "trainer.batch_size=0"], "trainer.batch_size=0 must be at least 1"),
    ("accumulation 0", "train", [*TRAIN, "trainer.grad_accum=0"], "trainer.grad_accum=0 must be at least 1"),
    ("save interval 0", "train", [*TRAIN, "trainer.save_every=0"], "trainer.save_every=0 must be at least 1"),
    ("shard size 0", "train", [*TRAIN, "data.shard_size=0"], "data.shard_size=0 must be at least 1"),
    ("eval prompt count 0", "train", [*TRAIN, "eval.num_prompts=0"], "eval.num_prompts=0 and eval.max_new_tokens"),
    ("γ 0 in the sweep", "train", [*TRAIN, "eval.gamma_sweep=[0,2]"], "every eval.gamma_sweep value must be ≥ 1"),
    ("load levels unsorted", "train", [*TRAIN, "eval.serve_load=[16,4]"], "must list concurrency levels ≥ 1 in rising"),
    ("server URL alone", "train", [*TRAIN, "eval.serve_load=[1]", "eval.serve_url=http://h:8000"], "go together"),
    ("unknown overlong policy", "train", [*TRAIN, "eval.overlong_prompts=cut"], "eval.overlong_prompts='cut'; use"),
    ("unknown dtype", "train", [*TRAIN, "trainer.mixed_precision=fp8"], "trainer.mixed_precision='fp8'; use one of"),
    ("cut share over 1", "train", [*TRAIN, "trainer.max_cut_share=2"], "trainer.max_cut_share=2.0 is a share"),
    ("negative learning rate", "train", [*TRAIN, "trainer.lr=-1"], "trainer.lr=-1.0 must be positive"),
    ("no new tokens", "train", [*TRAIN, "data.sampling.max_new_tokens=0"], "data.sampling.max_new_tokens=0 must be"),
    ("missing eval prompts file", "train", [*TRAIN, "eval_prompts={t}/none.jsonl"], "none.jsonl does not exist"),
    ("missing prompts file", "train", [*TRAIN, "data.prompts={t}/none.jsonl"], "none.jsonl does not exist"),
    ("unknown loss", "train", [*TRAIN, "trainer.loss=nope"], "trainer.loss='nope' is not a loss"),
    ("unknown optimizer", "train", [*TRAIN, "trainer.optimizer=sgd"], "trainer.optimizer='sgd'; use one of"),
    ("top-k targets for a draft LM", "train", [*TRAIN, "trainer.kd_top_k=8"], "for EAGLE-3's loss fkl only"),
    ("unknown data source", "train", [*TRAIN, "data.source=nope"], "data.source='nope'; use one of"),
    ("unknown toy world", "train", ["stages=[distill]", "target.name_or_path=toyworld:huge"], "unknown toy world"),
    (
        "chat prompts for a GGUF declaring no chat template",
        "train",
        ["recipe=toy", "stages=[distill]", "target.name_or_path={f}/base.gguf", "data.prompts={f}/ok.jsonl"],
        "data.prompts row 1 is a chat conversation, and the target has no chat template (a base model?): give it raw "
        'text to continue ({"text": …} rows, or a completion prompt set such as stdlib_continue), or set '
        "target.chat_template=FILE.jinja",
    ),
    (
        "Magpie on a GGUF declaring no chat template",
        "train",
        ["recipe=toy", "stages=[distill]", "target.name_or_path={f}/base.gguf", "data.prompts=magpie"],
        "has no chat template (its GGUF header declares none); Magpie needs an instruction-tuned target",
    ),
    (
        "held-out samples beyond what distilling can give",
        "train",
        ["recipe=toy_eagle", "target=micro", "drafter.layer_ids=[0,1,2]", "data.prompts=stdlib_code"]
        + ["data.max_prompts=24", "data.holdout=0", "eval_prompts=humaneval"],
        "drafter.select_samples=32 must leave ≥ trainer.batch_size=16 samples for training, and distilling gives at "
        "most 24 (data.max_prompts=24)",
    ),
    (
        "a batch beyond what distilling can give",
        "train",
        [*TRAIN[:2], "data.prompts=stdlib_code", "data.max_prompts=4", "data.holdout=0", "eval_prompts=humaneval"],
        "trainer.batch_size=16 is more than the 4 samples distilling gives at most (data.max_prompts=4)",
    ),
    (
        "a mask id that is the target's chat template marker",
        "train",
        ["recipe=toy_dflash", "target=micro", "drafter.layer_ids=[1,2]", "drafter.mask_token_id=2"],
        "drafter.mask_token_id=2 is the target's chat template marker token, which real text holds",
    ),
    (
        "a PARD id that is the target's end token",
        "train",
        ["recipe=toy_pard", "target=micro", "drafter.pard_token=1"],
        "drafter.pard_token=1 is the target's eos token",
    ),
    ("missing template file", "train", [*TRAIN, "target.chat_template={t}/chat.jinja"], "chat.jinja: no such file"),
    (
        "eval of a trainable drafter in a run that does not train it",
        "train",
        [*TRAIN[:2], "stages=[distill,eval]"],
        "no trained drafter in",
    ),
    ("training without distilled data", "train", [*TRAIN[:2], "stages=[train]"], "no distilled data in"),
    ("publishing without an eval report", "train", [*TRAIN[:2], "stages=[publish]"], "no eval report; run the eval"),
    (
        "a publish bar no chain can reach",
        "train",
        [*TRAIN[:2], "stages=[distill,train,eval,publish]", "publish.min_tau=9", "eval.num_speculative_tokens=4"],
        "publish.min_tau=9.0 is more than the τ of 5 that a chain of eval.num_speculative_tokens=4 can reach",
    ),
    (
        "eval prompts the drafter is trained on",
        "train",
        [*TRAIN[:2], "stages=[distill,train,eval]", "data.prompts={f}/ok.jsonl", "eval_prompts={f}/ok.jsonl"],
        "/ok.jsonl measures ok.jsonl, which data.prompts=",
    ),
    (
        "eval prompts sharing a benchmark with the training prompts",
        "train",
        [*TRAIN[:2], "stages=[distill,train,eval]", "data.prompts=humaneval", "eval_prompts=mt_bench+humaneval"],
        "eval_prompts=mt_bench+humaneval measures humaneval, which data.prompts=humaneval trains the drafter on",
    ),
    (
        "a draft LM init without its tokenizer",
        "train",
        [*TRAIN[:2], "stages=[distill,train]", "drafter.init={f}/real-draft"],
        "real-draft' has no tokenizer; the draft must ship the target's tokenizer",
    ),
    (
        "target features from vLLM where vLLM is not installed",
        "train",
        ["recipe=toy_eagle", "target=micro", "drafter.layer_ids=[0,1,2]", "stages=[distill,train]"]
        + ["drafter.features=vllm"],
        "drafter.features=vllm needs vLLM; pip install",
    ),
    (
        "an EAGLE-3 drafter for llama.cpp beside a target whose graph hands it no features",
        "train",
        ["recipe=toy_eagle", "target=hf", "target.name_or_path={f}/gemma3.gguf", "drafter.layer_ids=[1,3,5]"]
        + ["stages=[distill,train]", "publish.engines=[llamacpp]"],
        "llama.cpp cannot serve this drafter: its target (gemma3_text) hands llama.cpp's feature drafters none of its "
        "layer inputs",
    ),
    (
        "a bake-off contender with a batch beyond what distilling can give",
        "train",
        ["recipe=toy_bakeoff", "target=micro", "bakeoff.recipes=[toy]", "bakeoff.workloads={{}}", "bakeoff.serve=off"]
        + ["data.prompts=stdlib_code", "data.max_prompts=4", "data.holdout=0", "eval_prompts=humaneval"],
        "bake-off contender toy: trainer.batch_size=16 is more than the 4 samples distilling gives at most",
    ),
    (
        "a plan beyond this machine's memory",
        "train",
        [*TRAIN[:2], "stages=[distill,train]", "trainer.batch_size=65536"],
        "of memory and this machine has",
    ),
    (
        "EAGLE-3 layer out of range",
        "train",
        ["recipe=toy_eagle", *TRAIN[1:], "drafter.layer_ids=[0,99,1]"],  # TRAIN[0] names recipe=toy
        "EAGLE-3 fuses 3 distinct target layers in 0..2; got layer_ids=[0, 99, 1]",
    ),
    (
        "target path that does not exist",
        "train",
        ["stages=[distill]", "target.name_or_path={t}/no-model"],
        "no-model does not exist; give a local HF model directory or a Hub id",
    ),
    (
        "a retrieval drafter without distilled answers",
        "train",
        ["recipe=toy_retrieval", "target=micro", "stages=[eval]"],
        "retrieval drafts from the distilled answers and",
    ),
    ("prompts without a user turn", "train", [*TRAIN, "data.prompts={f}/no-user.jsonl"], "have no user turn"),
    (
        "prompts that would pass the target's context",
        "train",
        [*TRAIN, "data.max_prompt_tokens=1000", "data.sampling.max_new_tokens=100"],
        "pass the target's context of 1024 tokens; set data.max_prompt_tokens to at most 924",
    ),
    (
        "an eval prompt longer than the target's context",
        "eval",
        ["drafter_dir={f}/real-draft", "prompts={f}/long.jsonl", "out_dir={t}/out", "target_path={micro}"],
        "error: eval prompt 1 has",
    ),
    ("distill without out_dir", "distill", ["target=micro"], "out_dir is required; pass out_dir=..."),
    ("unknown data group", "distill", ["data=nope", "out_dir={t}/out"], "data=nope is not one of the data configs"),
    (
        "distill from a missing file",
        "distill",
        ["target=micro", "data.prompts={t}/none.jsonl", "out_dir={t}/out"],
        "none.jsonl does not exist",
    ),
    ("eval without drafter_dir", "eval", ["prompts={f}/ok.jsonl", "out_dir={t}/out"], "drafter_dir is required"),
    (
        "eval of a directory that does not exist",
        "eval",
        ["drafter_dir={t}/nothing", "prompts={f}/ok.jsonl", "out_dir={t}/out"],
        "is not a directory; pass an exported drafter directory",
    ),
    (
        "eval prompts file missing",
        "eval",
        ["drafter_dir={f}/plain-dir", "prompts={t}/none.jsonl", "out_dir={t}/out"],
        "none.jsonl does not exist",
    ),
    (
        "eval with no target named",
        "eval",
        ["drafter_dir={f}/draft-config", "prompts={f}/ok.jsonl", "out_dir={t}/out"],
        "has no drafthub.json to name its target; pass target_path=",
    ),
    (
        "eval with the toy-world alias",
        "eval",
        ["drafter_dir={f}/draft-config", "prompts={f}/ok.jsonl", "out_dir={t}/out", "target_path=toyworld:micro"],
        "is a python -m train alias; pass the toy world's directory",
    ),
    (
        "drafter config with no sizes",
        "eval",
        ["drafter_dir={f}/unsized-drafter", "prompts={f}/ok.jsonl", "out_dir={t}/out", "target_path={micro}"],
        "but no model size",
    ),
    (
        "Medusa heads in the original layout",
        "eval",
        ["drafter_dir={f}/medusa-original", "prompts={f}/ok.jsonl", "out_dir={t}/out", "target_path={micro}"],
        "FasterDecoding/Medusa's original layout; convert them first: python scripts/convert_medusa.py",
    ),
    (
        "eval of a directory that is no drafter",
        "eval",
        ["drafter_dir={f}/plain-dir", "prompts={f}/ok.jsonl", "out_dir={t}/out", "target_path={micro}"],
        "is not an exported drafter (no config.json)",
    ),
    ("publish a directory that does not exist", "push", ["{t}/nothing", "--hub-dir", "{t}/hub"], "is not a directory"),
    ("publish a directory with no provenance", "push", ["{f}/plain-dir", "--hub-dir", "{t}/hub"], "no drafthub.json"),
    ("publish to two places", "push", ["{f}/plain-dir", "--hub-dir", "{t}/h", "--repo-id", "me/x"], "exactly one of"),
    ("list without a registry", "push", ["--list"], "--list reads a local registry; pass --hub-dir PATH"),
    # Inputs the `files` fixture does not build are in tests/data/ (see its README.md).
    (
        "distill from a Latin-1 JSONL",
        "distill",
        ["target=micro", "data.prompts=" + os.path.join(os.path.dirname(__file__), "data", "prompts", "latin1.jsonl")]
        + ["out_dir={t}/out"],
        "latin1.jsonl:2 is not UTF-8 (byte 0xe9 at column 49); re-encode the file as UTF-8 (e.g. iconv -f latin1",
    ),
    (
        "distill from an empty .json",
        "distill",
        ["target=micro", "data.prompts=" + os.path.join(os.path.dirname(__file__), "data", "prompts", "empty.json")]
        + ["out_dir={t}/out"],
        "empty.json holds no conversations; give it a JSON list of",
    ),
    (
        "eval of ShareGPT prompts with a row with no turns",
        "eval",
        ["drafter_dir={f}/real-draft", "out_dir={t}/out", "target_path={micro}"]
        + ["prompts=" + os.path.join(os.path.dirname(__file__), "data", "prompts", "sharegpt-empty-row.json")],
        "eval prompt 2 has no user turn to answer",
    ),
    (
        "eval of Latin-1 prompts",
        "eval",
        ["drafter_dir={f}/real-draft", "out_dir={t}/out", "target_path={micro}"]
        + ["prompts=" + os.path.join(os.path.dirname(__file__), "data", "prompts", "latin1.jsonl")],
        "latin1.jsonl:2 is not UTF-8 (byte 0xe9 at column 49); re-encode the file as UTF-8",
    ),
    (
        "eval of a Spec-Bench row with no turns",
        "eval",
        ["drafter_dir={f}/real-draft", "prompts={f}/no-turns.jsonl", "out_dir={t}/out", "target_path={micro}"],
        "no-turns.jsonl:1: 'turns' must be a non-empty list of strings, one per user turn; got an empty list",
    ),
    (
        "eval of a prompts column that does not exist",
        "eval",
        ["drafter_dir={f}/real-draft", "prompts={f}/ok.jsonl", "out_dir={t}/out", "target_path={micro}"]
        + ["prompts_column=question"],
        "ok.jsonl:1: no field 'question', only ['messages']; set prompts_column to the one holding the prompts",
    ),
    (
        "distill of a HumanEval row whose prompt is no string",
        "distill",
        ["target=micro", "data.prompts={f}/stub-list.jsonl", "out_dir={t}/out"],
        "stub-list.jsonl:1: 'prompt' must be a string (one user turn), got list; to read it by what it holds",
    ),
    (
        "an eval prompts column without eval prompts",
        "train",
        [*TRAIN, "stages=[distill,train,eval]", "eval_prompts_column=turns"],
        "eval_prompts_column=turns names a column of eval_prompts, which is not set; set eval_prompts=",
    ),
    (
        "an eval prompts column that does not exist, before distillation",
        "train",
        [*TRAIN, "stages=[distill,train,eval]", "eval_prompts={f}/ok.jsonl", "eval_prompts_column=question"],
        "ok.jsonl:1: no field 'question', only ['messages']; set eval_prompts_column to the one holding the prompts",
    ),
    (
        "eval of a draft LM whose config.json was edited",
        "eval",
        ["drafter_dir={f}/edited-vocab", "prompts={f}/ok.jsonl", "out_dir={t}/out", "target_path={micro}"],
        "edited-vocab/config.json does not fit its weights: model.embed_tokens.weight is",
    ),
    (
        "eval writing its report into the drafter directory",
        "eval",
        ["drafter_dir={f}/real-draft", "prompts={f}/ok.jsonl", "out_dir={f}/real-draft", "target_path={micro}"],
        "real-draft is the drafter directory: the report would overwrite the export's files; pass another out_dir",
    ),
    (
        "eval writing its report inside the drafter directory",
        "eval",
        ["drafter_dir={f}/real-draft", "prompts={f}/ok.jsonl", "out_dir={f}/real-draft/eval", "target_path={micro}"],
        "real-draft/eval is inside the drafter directory",
    ),
    (
        "eval against a target with only pytorch_model.bin",
        "eval",
        ["drafter_dir={f}/real-draft", "prompts={f}/ok.jsonl", "out_dir={t}/out"]
        + ["target_path=" + os.path.join(os.path.dirname(__file__), "data", "bin-only-target")],
        "has only pytorch_model.bin: drafthub loads safetensors weights only; convert the weights "
        "(e.g. model.save_pretrained(dir, safe_serialization=True)) and pass target_path=dir",
    ),
]


@pytest.mark.parametrize("case,app,args,expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(
    case, app, args, expected, files, micro_world, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # a run without run_dir= would land here, not in the checkout
    argv = [a.format(f=files, t=tmp_path / "work", micro=micro_world.target_dir) for a in args]
    if app == "train" and not any(a.startswith("run_dir=") for a in argv):
        argv.append(f"run_dir={tmp_path / 'work' / 'run'}")
    code, lines = _push(argv, capsys) if app == "push" else _app(app, argv, capsys)
    assert code == 2, (case, lines)
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], (case, lines)
    # Nothing a corrected rerun would trip over: no dataset, checkpoint, report or registry entry.
    left = [p for p in (tmp_path / "work").rglob("*") if p.is_file()] if (tmp_path / "work").exists() else []
    completion = {"manifest.json", "train_summary.json", "eval_report.json", "index.json", "published.json"}
    assert not [p for p in left if p.name in completion], (case, left)
    assert not list(tmp_path.glob("runs")), case


# (case, the environment `accelerate launch` would give, arguments, expected text): what the launch decides
LAUNCH_CASES = [
    (
        "a global batch that does not split over the launched processes",
        {"WORLD_SIZE": "3"},
        [*TRAIN[:2], "stages=[distill,train]", "trainer.batch_size=16"],
        "trainer.batch_size=16 is the global batch and must split evenly over 3 processes",
    ),
    (
        "a sharded target with one process",
        {},
        [*TRAIN[:2], "stages=[distill,train]", "trainer.target_sharding=fsdp"],
        "trainer.target_sharding=fsdp shards the target over processes, but 1 was launched",
    ),
    (
        "a sharded target beside a layer-skip drafter",
        {"WORLD_SIZE": "2", "ACCELERATE_USE_FSDP": "true"},
        ["recipe=toy_layer_skip", "target=micro", "stages=[distill,train]", "trainer.batch_size=2"],
        "trainer.target_sharding=fsdp: layer_skip cannot train beside a sharded target",
    ),
    (
        "a ZeRO-3 target without DeepSpeed",
        {"WORLD_SIZE": "2"},
        [*TRAIN[:2], "stages=[distill,train]", "trainer.target_sharding=zero3"],
        "trainer.target_sharding=zero3 needs DeepSpeed",
    ),
]


@pytest.mark.parametrize("case,env,args,expected", LAUNCH_CASES, ids=[c[0] for c in LAUNCH_CASES])
def test_what_the_launch_decides_is_refused_before_distilling(case, env, args, expected, tmp_path, monkeypatch):
    for key in ("WORLD_SIZE", "ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    code, lines = _app("train", [*args, f"run_dir={tmp_path / 'run'}"], None)
    assert code == 2 and len(lines) == 1 and expected in lines[0], (case, lines)
    assert not (tmp_path / "run" / "data" / "manifest.json").exists()


def test_bad_input_table_is_broad():
    assert len(CASES) >= 30


def test_a_second_run_on_a_busy_directory_stops_at_once(tmp_path, micro_world, capsys):
    run_dir = tmp_path / "run"
    with exclusive(run_dir, "run directory"):  # this process plays the running job
        code, lines = _app("train", [*TRAIN, f"run_dir={run_dir}"], capsys)
    assert code == 2 and len(lines) == 1, lines
    assert (
        lines[0].startswith(f"error: run directory {run_dir} is in use by pid ") and "one run per directory" in lines[0]
    )
    assert not (run_dir / ".hydra").exists()  # it stopped before writing anything


def test_a_stale_lock_from_a_dead_process_is_taken_over_with_a_message(tmp_path, capsys):
    from distill.lock import LOCK_FILE

    tmp_path.joinpath(LOCK_FILE).write_text(json.dumps({"pid": 999999, "host": "gone", "since": "2026-01-01"}))
    with exclusive(tmp_path, "run directory"):
        owner = json.loads(tmp_path.joinpath(LOCK_FILE).read_text())
    assert owner["pid"] != 999999
    assert "took over the lock of pid 999999 on gone" in capsys.readouterr().err
    assert not tmp_path.joinpath(LOCK_FILE).exists()  # released cleanly: nothing left, nothing to take over


def test_a_run_directory_keeps_nothing_a_killed_write_left(tmp_path):
    from train.stages.run_dir import clean_debris

    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".drafter-old").mkdir()  # killed between the two renames of the export swap
    (tmp_path / ".drafter-old" / "config.json").write_text("{}")
    (tmp_path / ".drafter-k2j3h4g5").mkdir()  # a staging directory
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / ".eval_report.json.123-abcd1234.tmp").write_text("half")
    (tmp_path / "checkpoints" / ".tmp-step-0000003").mkdir(parents=True)
    clean_debris(tmp_path)
    assert (tmp_path / "drafter" / "config.json").exists()  # the last complete export, put back
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        ".hydra",
        "checkpoints",
        "drafter",
        "drafter/config.json",
        "eval",
    ]


def _digest(directory) -> dict:
    return {p.relative_to(directory): hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.rglob("*")
            if p.is_file()}  # fmt: skip


def test_python_m_eval_leaves_the_drafter_directory_byte_identical(files, micro_world, tmp_path):
    """Without record=true nothing in drafter_dir changes: not by a measured run, not by a refused one."""
    drafter, before = files / "real-draft", _digest(files / "real-draft")
    common = [f"drafter_dir={drafter}", f"prompts={files}/ok.jsonl", f"target_path={micro_world.target_dir}"]
    small = ["eval.num_prompts=1", "eval.max_new_tokens=8", "eval.warmup_prompts=0", "eval.gamma_sweep=[]"]
    code, _, err = run_app("eval", [*common, *small, f"out_dir={tmp_path / 'out'}"])
    assert code == 0 and (tmp_path / "out" / "eval_report.json").is_file(), err
    assert run_app("eval", [*common, *small, f"out_dir={drafter}"])[0] == 2
    assert _digest(drafter) == before


def _closed_url() -> str:
    from eval.serving.process import free_port

    return f"http://127.0.0.1:{free_port()}"  # nothing listens there


# (case, app, arguments, expected): refusals the serving engines' presence would otherwise pre-empt (they are taken as
# installed here), made before the target decodes anything
SERVING_CASES = [
    (
        "eval against deployed servers that do not answer",
        "eval",
        ["eval.serve_load=[1]", "eval.serve_url={url}", "eval.baseline_url={url}"],
        "eval.serve_url={url}: no server answers at {url}/health",
    ),
    (
        "the pipeline against deployed servers that do not answer",
        "train",
        [
            *TRAIN,
            "stages=[distill,train,eval]",
            "eval.serve_load=[1]",
            "eval.serve_url={url}",
            "eval.baseline_url={url}",
        ],
        "eval.serve_url={url}: no server answers at {url}/health",
    ),
    pytest.param(  # checked after llama.cpp itself: reached only where it is built
        "eval served by llama.cpp without the GGUF",
        "eval",
        ["eval.serve=llamacpp"],
        "real-draft has no gguf/",
        marks=pytest.mark.needs_llamacpp,
    ),
    (
        "DSpark served by vLLM where only its GPU runner serves it",
        "eval",
        ["eval.serve=vllm", "drafter_dir={files}/dspark"],
        "needs vLLM's GPU runner: vLLM 0.32 serves DSpark drafters only with its V2 model runner",
    ),
    (
        "DSpark under load where only vLLM's GPU runner serves it",
        "eval",
        ["eval.serve_load=[1]", "drafter_dir={files}/dspark"],
        "eval.serve_load: needs vLLM's GPU runner: vLLM 0.32 serves DSpark drafters only with its V2 model runner",
    ),
]


@pytest.mark.parametrize(
    "case,app,args,expected", SERVING_CASES, ids=[getattr(c, "values", c)[0] for c in SERVING_CASES]
)
def test_serving_refusals_come_before_any_decoding(
    case, app, args, expected, files, micro_world, tmp_path, monkeypatch
):
    import eval.serving
    import eval.serving.llamacpp
    import train.stages.preflight

    for module in (eval.serving, eval.serving.llamacpp, train.stages.preflight):
        monkeypatch.setattr(module, "missing_reason", lambda *engine: None)
    monkeypatch.chdir(tmp_path)
    url = _closed_url()
    if "DSpark" in case and torch.cuda.is_available():
        pytest.skip("vLLM's GPU runner serves DSpark here")
    argv = [a.format(url=url, files=files) for a in args]
    drafter = Path(next((a.split("=", 1)[1] for a in argv if a.startswith("drafter_dir=")), files / "real-draft"))
    before = _digest(drafter)
    argv += [f"run_dir={tmp_path / 'run'}" if app == "train" else f"out_dir={tmp_path / 'out'}"]
    if app == "eval":
        argv += [f"prompts={files}/ok.jsonl", f"target_path={micro_world.target_dir}"]
        argv += [] if any(a.startswith("drafter_dir=") for a in argv) else [f"drafter_dir={drafter}"]
    code, lines = _app(app, argv, None)
    assert code == 2 and len(lines) == 1 and expected.format(url=url) in lines[0], lines
    assert not (tmp_path / "out").exists() and not list((tmp_path / "run").rglob("manifest.json"))  # nothing decoded
    assert _digest(drafter) == before


def test_a_read_only_directory_is_not_locked(tmp_path):
    """Nobody can change it, and the lock file could not be created: a finished run is re-read in place."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as root: every directory is writable")
        with exclusive(ro, "run directory"):
            pass
        assert list(ro.iterdir()) == []
    finally:
        ro.chmod(0o755)


def test_a_sequence_cap_that_cuts_the_answers_is_refused_before_training(tmp_path, micro_world, capsys):
    """trainer.max_seq_len below the distilled samples' lengths would train on their prompts and drop their answers
    (a default kept from shorter data): refused once the data is known, before the target loads; the distilled
    data stays for the corrected rerun, and no checkpoint is written."""
    run = tmp_path / "run"
    small = ["recipe=toy", "target=micro", "data.max_prompts=16", "data.sampling.max_new_tokens=24", f"run_dir={run}"]
    code, lines = _app("train", [*small, "stages=[distill,train]", "trainer.max_seq_len=64"], capsys)
    errors = [line for line in lines if line.startswith("error:")]  # after the distill stage's progress lines
    assert code == 2 and len(errors) == 1 and lines[-1] == errors[0], lines
    assert re.fullmatch(
        r"error: trainer\.max_seq_len=64 cuts (\d+) of 16 samples, and \d+\.\d% of the answer tokens with them "
        r"\(the longest sample has (\d+) tokens\); set trainer\.max_seq_len=\2, distil with a lower "
        r"data\.max_prompt_tokens or data\.sampling\.max_new_tokens, or accept the loss with a higher "
        r"trainer\.max_cut_share",
        errors[0],
    ), lines
    assert (run / "data" / "manifest.json").exists() and not (run / "checkpoints").exists()


def test_a_mask_id_on_the_targets_pad_token_is_allowed_and_said_once(micro_world, capsys):
    """Real text never holds pad or unknown: a mask slot fed one is told apart, so the run goes on, saying so."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from train.config import register_configs
    from train.stages.preflight import check_run

    register_configs()
    with initialize_config_module(config_module="conf", version_base=None):
        cfg = compose("config", overrides=["recipe=toy_dflash", "target=micro", "drafter.layer_ids=[1,2]"])
    cfg.drafter.mask_token_id = 0  # the micro world's <|pad|>
    check_run(OmegaConf.to_object(cfg))
    assert capsys.readouterr().out.count("drafter.mask_token_id=0 is the target's pad token: allowed") == 1
