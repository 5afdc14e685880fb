"""llama.cpp as a serving engine: GGUF exports written by llama.cpp's own converter, served by llama-server, its
counters and outputs compared with our engine's; the tokenizer declaration checked and refused when it fails."""

import copy
import json
import shutil
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from gguf import GGMLQuantizationType as gguf_types

from eval.config import LlamaCppServeConfig
from eval.errors import EvalError
from eval.serving import llamacpp as served_llamacpp
from eval.serving.base import verdict
from heads.errors import HeadsError
from heads.families import FAMILIES, read_export
from heads.formats import llamacpp
from heads.layer_skip import LayerSkipDrafter
from heads.ngram import NgramDrafter
from heads.retrieval import RetrievalDrafter
from tests.exporting import export
from tests.serving.settings import SERVED
from tests.serving.test_served_check import _serve

needs_llamacpp = pytest.mark.needs_llamacpp  # registered in pyproject.toml
CFG = replace(SERVED, serve="llamacpp", llamacpp=LlamaCppServeConfig(speed_repeats=0))
METRICS = """# HELP llamacpp:spec_decode_num_drafts_total Speculative: Total speculative decoding verification steps
llamacpp:spec_decode_num_draft_tokens_total 30
llamacpp:spec_decode_num_accepted_tokens_total 12
llamacpp:spec_decode_num_drafts_total 10
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 7
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 1
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 4
"""


def _tokenizer_json(tmp_path: Path, micro_world, edit) -> Path:
    out = tmp_path / "tok"
    shutil.copytree(micro_world.target_dir, out, ignore=shutil.ignore_patterns("*.safetensors"))
    spec = json.loads((out / "tokenizer.json").read_text())
    edit(spec)
    (out / "tokenizer.json").write_text(json.dumps(spec))
    return out


def test_only_gpt2_byte_level_pre_tokenization_is_declared(tmp_path, micro_world):
    assert (
        llamacpp.tokenizer.declared_pre_tokenizer(micro_world.target_dir) == "gpt-2"
    )  # the toy world's byte-level BPE
    lowercased = _tokenizer_json(tmp_path / "a", micro_world, lambda s: s.update(normalizer={"type": "Lowercase"}))
    assert llamacpp.tokenizer.declared_pre_tokenizer(lowercased) is None  # a normalizer llama.cpp's gpt-2 type lacks
    prefixed = _tokenizer_json(tmp_path / "b", micro_world, lambda s: s["pre_tokenizer"].update(add_prefix_space=True))
    assert llamacpp.tokenizer.declared_pre_tokenizer(prefixed) is None


def test_counters_are_read_from_llama_server_metrics(monkeypatch):
    monkeypatch.setattr(served_llamacpp, "http_get", lambda url, timeout=10.0: METRICS.encode())
    assert served_llamacpp.counters("http://x") == (10, 12, [7, 4, 1], 30)


def test_llama_server_returns_no_end_token_and_the_comparison_adds_it():
    assert served_llamacpp.with_end_token([5, 6], [5, 6, 2], {2}) == [5, 6, 2]
    assert served_llamacpp.with_end_token([5, 7], [5, 6, 2], {2}) == [5, 7]  # a real difference stays one
    assert served_llamacpp.with_end_token([5, 6, 9], [5, 6, 9], {2}) == [5, 6, 9]


def test_a_stated_rule_difference_judges_outputs_only():
    ok = verdict(2.0, 1.5, 6, 6, 0.05, engine="llama.cpp", rule_difference="another rule")
    assert ok[0] == "ok" and "not compared: another rule" in ok[1]
    assert verdict(2.0, 1.5, 5, 6, 0.05, engine="llama.cpp", rule_difference="r")[0] == "broken"


def test_gguf_is_written_only_when_asked_for(tmp_path, target, tokenizer):
    from heads.config import DraftLMConfig
    from heads.draft_lm import DraftLM

    drafter = DraftLM.from_config(DraftLMConfig(hidden_size=32, intermediate_size=64), target.config, tokenizer)
    plain = export(drafter, tmp_path / "plain", tokenizer=tokenizer)
    assert not (plain / llamacpp.SUBDIR).exists()
    assert FAMILIES["draft_lm"].optional_engines(["vllm", None]) == ()
    assert FAMILIES["draft_lm"].optional_engines(["llamacpp"]) == ("llamacpp",)


def test_the_card_prints_the_exact_llama_server_flags():
    usage = FAMILIES["eagle3"].consumer("llamacpp").usage("org/target", 4, {})
    assert "llama-server -m target.gguf -md THIS_DIRECTORY/gguf/draft.gguf --spec-type draft-eagle3" in usage
    assert "--spec-draft-n-max 4 --spec-draft-n-min 0 --spec-draft-p-min 0" in usage
    ngram = FAMILIES["ngram"].consumer("llamacpp").usage("t", 3, {"drafter_config": {"prompt_lookup_min": 2}})
    assert "--spec-type ngram-simple --spec-ngram-simple-size-n 2 --spec-ngram-simple-size-m 3" in ngram


def test_a_missing_llama_cpp_is_one_line_naming_the_build_script(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTHUB_LLAMACPP", str(tmp_path / "none"))
    monkeypatch.setenv("PATH", str(tmp_path))
    reason = llamacpp.programs.missing()
    assert "scripts/build_llamacpp.py" in reason and "\n" not in reason
    assert "PATH" not in reason  # the converter is what is missing first: a llama-server on PATH would not bring it
    with pytest.raises(EvalError, match="eval.serve=llamacpp: .*build_llamacpp"):
        served_llamacpp.served_check(
            "t", _stand_in(tmp_path), [[1]], reference=[[1]], ours={}, cfg=CFG, eos_ids=set(), dtype=""
        )


@pytest.fixture(scope="module")
def deeper_target(tmp_path_factory, target, tokenizer):
    """The micro target with a third layer that adds nothing (its attention and MLP outputs zero): the same outputs
    and features, but layer id 2 is now a layer input, which llama.cpp's EAGLE-3 reads (see _refuse_last_layer)."""
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(target.config)
    config.num_hidden_layers += 1
    deeper = AutoModelForCausalLM.from_config(config).eval()
    state = target.state_dict()
    last = target.config.num_hidden_layers - 1
    new = {k.replace(f"layers.{last}.", f"layers.{last + 1}."): v for k, v in state.items() if f"layers.{last}." in k}
    deeper.load_state_dict({**state, **new})
    with torch.no_grad():
        added = deeper.model.layers[last + 1]
        added.self_attn.o_proj.weight.zero_()
        added.mlp.down_proj.weight.zero_()
    out = tmp_path_factory.mktemp("deeper")
    deeper.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return deeper, out


@pytest.fixture(scope="module")
def gguf_exports(tmp_path_factory, micro_world, target, tokenizer, deeper_target, prompt_ids):
    """The served-check tests' fitted drafters, exported as publish.engines=[llamacpp] exports them."""
    from eval.sampling import SamplingParams
    from eval.speculative import autoregressive_generate
    from tests.eval.dflash_fit import fit_dflash, fit_dflash2, fit_dspark
    from tests.eval.eagle_fit import fit_eagle
    from tests.serving.test_served_check import fitted_draft_lm

    root = tmp_path_factory.mktemp("gguf")
    verifier = {"name_or_path": str(micro_world.target_dir), "architectures": ["LlamaForCausalLM"]}
    deeper_verifier = {**verifier, "name_or_path": str(deeper_target[1])}
    engines = ("llamacpp",)
    # the target's own answers to other prompts, each twice: llama.cpp drafts from a store bigram seen ≥ 2 times
    answers = autoregressive_generate(
        target, prompt_ids[::-1], 40, SamplingParams(), eos_ids={tokenizer.eos_token_id}, vocab_size=len(tokenizer)
    )
    store = RetrievalDrafter(answers=tuple(tuple(a) for a in answers for _ in (0, 1)))
    return {
        "retrieval": export(store, root / "retrieval", engines=engines),
        "draft_lm": export(fitted_draft_lm(target, tokenizer), root / "draft_lm", tokenizer=tokenizer, engines=engines),
        # fitted on the micro target, served on its deeper twin: layer ids [0, 1, 2] are all layer inputs there
        "eagle3": export(fit_eagle(target), root / "eagle3", verifier=deeper_verifier, engines=engines),
        "ngram": export(NgramDrafter(prompt_lookup_min=1, prompt_lookup_max=3), root / "ngram", engines=engines),
        "layer_skip": export(
            LayerSkipDrafter.from_target(target, [1]), root / "layer_skip", tokenizer=tokenizer, engines=engines
        ),
        # fusing the output of the micro target's first layer: llama.cpp's DFlash reads layer inputs (see below)
        "dflash": export(fit_dflash(target, layer_ids=(1,)), root / "dflash", verifier=verifier, engines=engines),
        "dspark": export(fit_dspark(target, layer_ids=(1,)), root / "dspark", verifier=verifier, engines=engines),
        "dflash2": export(fit_dflash2(target, layer_ids=(1,)), root / "dflash2", verifier=verifier, engines=engines),
    }


@needs_llamacpp
@pytest.mark.parametrize(
    "kind", ["draft_lm", "eagle3", "dflash", "dspark", "dflash2", "layer_skip", "ngram", "retrieval"]
)
def test_llama_server_serves_each_gguf_export_as_our_engine_runs_it(
    kind, gguf_exports, target, tokenizer, micro_world, prompt_ids, deeper_target
):
    model, target_dir = deeper_target if kind == "eagle3" else (target, None)
    report = _serve(model, tokenizer, micro_world, gguf_exports[kind], prompt_ids, cfg=CFG, target_dir=target_dir)
    served = report["served"]
    methods = {
        "eagle3": "draft-eagle3",
        "dflash": "draft-dflash",
        "dspark": "draft-dspark",
        "dflash2": "draft-dflash",
        "ngram": "ngram-simple",
        "retrieval": "ngram-cache",
    }
    assert served["engine"] == "llamacpp" and served["method"] == methods.get(kind, "draft-simple")
    assert served["equal_prompts"] == len(prompt_ids), served["reason"]  # llama.cpp's output == the target's greedy
    assert served["verdict"] == "ok", served["reason"]
    ours = served["ours"]["tau"]
    if kind == "ngram":  # another rule (stated): reported, not compared
        assert "ngram-simple matches only" in served["reason"] and served["tau"] > 1.0
    elif kind == "retrieval":  # llama.cpp loaded the store as its static n-gram cache (-lcs), under its own rule
        assert "ngram-cache drafts up to 8 tokens" in served["reason"] and served["tau"] > 1.0
        assert "-lcs" in served["server_args"]
    else:
        assert 1.0 < served["tau"] and abs(served["tau"] - ours) <= 0.05 * ours, (served["tau"], ours)
        assert len(served["per_position_acceptance"]) == CFG.num_speculative_tokens


@pytest.mark.parametrize(("kind", "ids"), [("dflash", "1, 2"), ("eagle3", "0, 1, 2")])
def test_a_drafter_fusing_the_last_target_layer_is_refused_before_converting(kind, ids, tmp_path, micro_world, target):
    """llama.cpp's feature drafters read layer inputs only: its DFlash aborts on such a drafter's first decode, its
    EAGLE-3 drafts from a buffer the target never writes (test above: its deeper twin serves the same drafter)."""
    from tests.eval.dflash_fit import fit_dflash
    from tests.eval.eagle_fit import fit_eagle

    verifier = {"name_or_path": str(micro_world.target_dir), "architectures": ["LlamaForCausalLM"]}
    drafter = {"dflash": fit_dflash, "eagle3": fit_eagle}[kind](target, steps=1)  # id 2: the last layer's output
    with pytest.raises(HeadsError, match=rf"fuses the target's last layer \(drafter.layer_ids=\[{ids}\] of 2\)"):
        export(drafter, tmp_path / "d", verifier=verifier, engines=("llamacpp",))
    assert not (tmp_path / "d").exists()  # no partial export


@needs_llamacpp
@pytest.mark.parametrize("engines", [["eval.serve=llamacpp"], ["publish.engines=[llamacpp]"]])
def test_a_recipe_fusing_the_last_layer_for_llama_cpp_is_refused_before_distilling(engines, tmp_path, monkeypatch):
    """The recipe's drafter.layer_ids and the target's config decide it: refused before any data is made."""
    from tests.cli_runs import run_app

    monkeypatch.chdir(tmp_path)
    argv = ["recipe=toy", "target=micro", "drafter=dflash2", "drafter.layer_ids=[1,2]", f"run_dir={tmp_path}/run"]
    code, _, err = run_app("train", [*argv, *engines])
    lines = [line for line in err.splitlines() if line.strip() and "it/s]" not in line]
    assert code == 2 and len(lines) == 1, lines
    assert (
        "llama.cpp cannot serve this drafter: it fuses the target's last layer (drafter.layer_ids=[1, 2] of 2)"
        in (lines[0])
    )
    assert not list(tmp_path.rglob("manifest.json")) and not list(tmp_path.rglob("*.safetensors"))


@needs_llamacpp
def test_the_targets_refused_for_feature_drafters_are_those_the_pinned_graphs_leave_unfed():
    """FEATURE_TARGETS says which targets' graphs hand llama.cpp's EAGLE-3/DFlash drafters their layer inputs; checked
    against the pinned source, so a new pin that changes them fails here, not in a user's llama-server."""
    from types import SimpleNamespace

    models = llamacpp.programs.source_dir() / "src" / "models"
    for model_type, source in (("llama", "llama"), ("qwen3", "qwen3"), ("gemma3_text", "gemma3"), ("qwen2", "qwen2")):
        fed = "t_layer_inp[il]" in (models / f"{source}.cpp").read_text()
        assert (llamacpp._unfed_target(SimpleNamespace(model_type=model_type)) is None) == fed, model_type


@needs_llamacpp
def test_a_truncated_gguf_is_refused_before_decoding(gguf_exports, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(gguf_exports["draft_lm"], bad)
    gguf = bad / "gguf" / "draft.gguf"
    gguf.write_bytes(gguf.read_bytes()[: gguf.stat().st_size // 2])
    served_llamacpp.servable(read_export(gguf_exports["draft_lm"]))  # the export as written is readable
    with pytest.raises(EvalError, match=r"draft.gguf is not a readable GGUF .*re-export the drafter"):
        served_llamacpp.servable(read_export(bad))


@needs_llamacpp
def test_dsparks_adaptive_length_is_llama_cpps_confidence_cut(gguf_exports, target, tokenizer, micro_world, prompt_ids):
    """eval.draft_confidence_min and llama-server's --spec-draft-p-min cut the block at the same draft."""
    cfg = replace(CFG, draft_confidence_min=0.3)
    report = _serve(target, tokenizer, micro_world, gguf_exports["dspark"], prompt_ids, cfg=cfg)
    served = report["served"]
    args = served["server_args"]
    assert args[args.index("--spec-draft-p-min") + 1] == "0.3"
    assert report["draft_tokens_per_step"] < CFG.num_speculative_tokens  # blocks were cut
    assert served["verdict"] == "ok" and served["equal_prompts"] == len(prompt_ids), served["reason"]
    assert abs(served["tau"] - served["ours"]["tau"]) <= 0.05 * served["ours"]["tau"], served


# (family, config key, wrong value): what the linter refuses, served anyway: the acceptance it prevents. (DFlash's
# layer ids take DFlash2's path through llama.cpp's DFlash converter; its micro drafter is accepted too rarely, τ 1.06,
# for a collapse to show.)
SILENT = [
    ("dspark", "sample_from_anchor", False),  # served fill-in: every draft one position off
    ("dflash2", "dflash_config.target_layer_ids", [-1]),  # off by one: the embeddings instead of layer 1's output
]


@needs_llamacpp
@pytest.mark.parametrize(("kind", "key", "wrong"), SILENT)
def test_a_silently_wrong_block_export_is_refused_and_served_it_collapses(
    kind, key, wrong, gguf_exports, tmp_path, micro_world, prompt_ids
):
    right = gguf_exports[kind]
    bad = tmp_path / "bad"
    shutil.copytree(right, bad, ignore=shutil.ignore_patterns("gguf"))
    config = json.loads((bad / "config.json").read_text())
    outer, _, last = key.rpartition(".")
    (config[outer] if outer else config)[last] = wrong
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(HeadsError, match=r"one position off|off by one"):
        FAMILIES[kind].lint(bad)  # drafthub refuses it by name
    spec = FAMILIES[kind].consumer("llamacpp").speculative_config(right, 3)["method"]
    served = {
        d: served_llamacpp.unchecked_served_tau(micro_world.target_dir, d, spec, prompt_ids, gamma=3, max_new_tokens=24)
        for d in (right, bad)
    }
    # what llama.cpp makes of it, with no error: the accepted drafts per step at least halve (measured: DSpark
    # 1.186 → 1.091)
    assert served[right] > 1.1 and served[bad] - 1 < 0.6 * (served[right] - 1), served


@needs_llamacpp
def test_a_tokenizer_llama_cpp_reads_differently_is_refused_in_one_line(tmp_path, micro_world, monkeypatch):
    # declared as another pre-tokenizer than the one it is: the check finds llama.cpp's ids differ
    monkeypatch.setattr(llamacpp.tokenizer, "declared_pre_tokenizer", lambda d: "llama3")
    out = tmp_path / "t.gguf"
    with pytest.raises(HeadsError, match="llama.cpp would tokenize differently") as refused:
        llamacpp.writer.convert(micro_world.target_dir, out)
    assert "\n" not in str(refused.value) and not out.exists()


@needs_llamacpp
def test_a_tokenizer_the_converter_does_not_know_and_we_may_not_declare_is_refused(tmp_path, micro_world):
    lowercased = _tokenizer_json(tmp_path, micro_world, lambda s: s.update(normalizer={"type": "Lowercase"}))
    shutil.copy(Path(micro_world.target_dir) / "model.safetensors", lowercased)
    out = tmp_path / "t.gguf"
    with pytest.raises(HeadsError, match="converter refused .*pre-tokenizer was not recognized") as refused:
        llamacpp.writer.convert(lowercased, out)
    assert "\n" not in str(refused.value) and not out.exists()


@needs_llamacpp
def test_llama_server_is_stopped_when_the_check_fails_inside(tmp_path, micro_world):
    gguf = llamacpp.target.target_gguf(micro_world.target_dir, llamacpp.programs.home() / "targets")
    with pytest.raises(RuntimeError, match="inside"):
        with served_llamacpp.llama_server(gguf, [], context=256, log=tmp_path / "log") as url:
            urllib.request.urlopen(url + "/health", timeout=5).read()
            raise RuntimeError("inside")
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/health", timeout=5)
    (tmp_path / "bad.gguf").write_bytes(b"not a gguf")
    with pytest.raises(EvalError, match="llama-server exited"):
        with served_llamacpp.llama_server(tmp_path / "bad.gguf", [], context=256, log=tmp_path / "log2"):
            pass


def test_served_speed_interleaves_and_reports_the_speedup():
    from eval.serving.base import served_speed

    calls = []

    def timed(engine, prompt):
        calls.append(engine)
        return 10, (0.5 if engine == "spec" else 1.0)

    speed = served_speed("spec", "base", [[1], [2]], timed, repeats=2, cfg=SERVED)
    assert speed["speedup"] == pytest.approx(2.0) and len(calls) == 8
    assert calls[:4] == ["spec", "base", "base", "spec"]  # the order alternates per prompt
    assert torch.isfinite(torch.tensor(speed["tokens_per_second"]["speculative"]))


def test_asking_for_llamacpp_without_it_stops_before_any_stage(tmp_path, monkeypatch):
    from tests.test_cli import SMALL, run

    monkeypatch.setenv("DRAFTHUB_LLAMACPP", str(tmp_path / "no-llamacpp"))
    r = run("train", "recipe=toy", *SMALL, "publish.engines=[llamacpp]", f"run_dir={tmp_path}/run")
    assert r.returncode != 0 and "publish.engines has llamacpp" in r.stderr and "build_llamacpp.py" in r.stderr
    assert not (tmp_path / "run" / "data").exists()  # refused before distilling


@needs_llamacpp
@pytest.mark.slow
def test_pipeline_serves_its_gguf_export_with_llama_cpp_and_publishes_it(tmp_path, micro_world):
    from heads.card import served_engine
    from heads.formats.fingerprint import served_files_hash
    from tests.test_cli import SMALL, run

    r = run("train", "recipe=toy", *SMALL, "trainer.max_steps=30", "eval.serve=llamacpp", f"run_dir={tmp_path}/run")
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "run"
    report = json.loads((run_dir / "eval" / "eval_report.json").read_text())
    served = report["served"]
    assert served["method"] == "draft-simple" and served["verdict"] == "ok", served
    assert served["equal_prompts"] == served["num_prompts"] == 4
    assert (run_dir / "drafter" / "gguf" / "draft.gguf").is_file()  # eval.serve=llamacpp asked for the layout
    assert served["files_sha256"] == served_files_hash(run_dir / "drafter")  # published == served, GGUF included
    tps = served["tokens_per_second"]  # llama-server with the drafter vs without it, each prompt alone
    assert served["speedup"] == pytest.approx(tps["speculative"] / tps["no_speculation"])
    assert served["speed_repeats"] == 2 and "llama.cpp" in served_engine(served) and served["engine_version"]
    assert "## Served check: llama.cpp" in (run_dir / "eval" / "report.md").read_text()
    card = (run_dir / "drafter" / "README.md").read_text()
    assert "Served check: llama.cpp" in card and "**ok**" in card and "without speculation" in card
    assert f"--spec-type draft-simple --spec-draft-n-max {served['num_speculative_tokens']}" in card


def test_ctrl_c_in_the_served_check_leaves_no_log_directory(tmp_path, micro_world, monkeypatch):
    """The servers' temporary logs are kept only for a server that failed (its error names them), not for a stop the
    user asked for."""
    import tempfile
    from types import SimpleNamespace

    from distill.targets import resolve_target
    from tests.gguf_files import write_gguf

    spec = SimpleNamespace(speculative_config=lambda d, g: {"method": "draft-simple", "args": []}, rule_difference=None)
    monkeypatch.setattr(served_llamacpp, "servable", lambda drafter_dir: spec)

    def interrupted(*args, logs, **kwargs):
        (logs / "llama-server.log").write_text("started")
        raise KeyboardInterrupt

    monkeypatch.setattr(served_llamacpp, "serve_and_decode", interrupted)
    (tmp_path / "q").mkdir()
    target = resolve_target(str(write_gguf(micro_world.target_dir, tmp_path / "q" / "m.gguf", qtype=gguf_types.Q8_0)))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with pytest.raises(KeyboardInterrupt):
        served_llamacpp.served_check(
            target, _stand_in(tmp_path), [[1]], reference=[[1]], ours={}, cfg=CFG, eos_ids=set(), dtype="f"
        )
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_quantized_gguf_target_is_judged_against_llama_servers_own_output(tmp_path, micro_world, monkeypatch):
    """llama-server serves a GGUF target's own quantized file (Q8_0 here), another model than the dequantized
    weights our engine decodes: a prompt whose output left ours counts as equal only when llama-server decodes it
    the same without the drafter. Float weights keep the strict rule."""
    from types import SimpleNamespace

    from distill.targets import resolve_target
    from tests.gguf_files import write_gguf

    spec = SimpleNamespace(speculative_config=lambda d, g: {"method": "draft-simple", "args": []}, rule_difference=None)
    monkeypatch.setattr(served_llamacpp, "servable", lambda drafter_dir: spec)
    monkeypatch.setattr(served_llamacpp, "server_version", lambda: "stub")
    reference, served = [[5, 6, 7], [7, 9, 9]], [[5, 6, 7], [7, 8, 8]]  # prompt 1 left our greedy output
    ours = {"tau": 2.0, "per_position_acceptance": [0.6, 0.4, 0.2], "speedup": 1.0, "speedup_spread": {}}

    def check(target_file, alone):
        decoded = (served, {1: alone}, (10, 12, [6, 4, 2], 30), None)
        monkeypatch.setattr(served_llamacpp, "serve_and_decode", lambda *a, **k: decoded)
        target = resolve_target(str(target_file))
        return served_llamacpp.served_check(
            target,
            _stand_in(tmp_path),
            [[1], [2]],
            reference=reference,
            ours=ours,
            cfg=CFG,
            eos_ids=set(),
            dtype="float32",
        )

    (tmp_path / "q").mkdir()
    quantized = write_gguf(micro_world.target_dir, tmp_path / "q" / "m.gguf", qtype=gguf_types.Q8_0)
    same = check(quantized, alone=[7, 8, 8])
    assert same["verdict"] == "ok" and same["target_quantization"] == ["Q8_0"] and same["equal_to_engine_alone"] == 1
    assert "llama-server serves the target's own GGUF (Q8_0)" in same["reason"]
    assert check(quantized, alone=[7, 9, 9])["verdict"] == "broken"  # the drafter changed llama.cpp's own output
    (tmp_path / "f").mkdir()
    floats = write_gguf(micro_world.target_dir, tmp_path / "f" / "m.gguf")
    strict = check(floats, alone=[7, 8, 8])
    assert strict["verdict"] == "broken" and strict["target_quantization"] == []


@needs_llamacpp
def test_llama_servers_own_draft_cut_is_served_and_its_tau_not_held_to_ours(
    gguf_exports, target, tokenizer, micro_world, prompt_ids
):
    """eval.llamacpp.draft_p_min: llama-server stops a draft LM's draft at a token it gives less than p (the regime
    llama.cpp's users run in); outputs stay the target's, drafts get shorter, and τ is reported beside ours."""
    cfg = replace(CFG, llamacpp=LlamaCppServeConfig(speed_repeats=0, draft_p_min=0.5))
    served = _serve(target, tokenizer, micro_world, gguf_exports["draft_lm"], prompt_ids, cfg=cfg)["served"]
    args = served["server_args"]
    assert args[args.index("--spec-draft-p-min") + 1] == "0.5" and served["draft_p_min"] == 0.5
    assert 0 < served["draft_tokens"] < served["drafts"] * CFG.num_speculative_tokens  # drafts, some of them cut
    assert served["verdict"] == "ok" and served["equal_prompts"] == len(prompt_ids), served["reason"]
    assert "not compared: llama-server stops a draft below probability 0.5" in served["reason"]


@pytest.mark.parametrize("settings", [{"draft_p_min": 1.0}, {"draft_p_min": -0.1}, {"draft_p_min": 0.5, "both": 1}])
def test_a_draft_cut_that_is_no_probability_or_doubles_the_adaptive_length_is_refused(settings):
    from eval.run import check_settings

    both = {"draft_confidence_min": 0.3} if settings.pop("both", None) else {}
    cfg = replace(CFG, llamacpp=LlamaCppServeConfig(**settings), **both)
    with pytest.raises(EvalError, match=r"eval.llamacpp.draft_p_min=.*: give a probability in \[0, 1\) \(0: always"):
        check_settings(cfg)
    check_settings(replace(CFG, llamacpp=LlamaCppServeConfig(draft_p_min=0.5)))


def test_a_server_killed_while_repacking_its_weights_is_started_again_without_repacking(tmp_path, monkeypatch, capsys):
    """The pinned llama-server dies of SIGILL (at times SIGSEGV) repacking Gemma 3's K-quants on the AMX machine:
    the served check starts it again with --no-repack, says so, and a server that dies otherwise stays an error."""
    import signal
    import sys

    from eval.errors import EvalError
    from eval.serving.llamacpp import NO_REPACK, llama_server

    fake = tmp_path / "llama-server"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import http.server, json, os, signal, sys\n"
        f"if '{NO_REPACK}' not in sys.argv:\n"
        "    os.kill(os.getpid(), int(os.environ['FAKE_SIGNAL']))\n"
        "port = int(sys.argv[sys.argv.index('--port') + 1])\n"
        "class Health(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers(); self.wfile.write(json.dumps({'status': 'ok'}).encode())\n"
        "http.server.HTTPServer(('127.0.0.1', port), Health).serve_forever()\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("DRAFTHUB_LLAMA_SERVER", str(fake))
    for killed in (signal.SIGILL, signal.SIGSEGV):
        monkeypatch.setenv("FAKE_SIGNAL", str(int(killed)))
        with llama_server(tmp_path / "m.gguf", [], context=64, log=tmp_path / "server.log") as url:
            assert url.startswith("http://127.0.0.1:")
        assert f"killed by {killed.name} while starting" in capsys.readouterr().out
    monkeypatch.setenv("FAKE_SIGNAL", str(int(signal.SIGTERM)))
    with pytest.raises(EvalError, match=r"llama-server exited \(-15\) while starting"):
        with llama_server(tmp_path / "m.gguf", [], context=64, log=tmp_path / "server.log"):
            pass


def _stand_in(path):
    """An export record for a check that fails, or is stubbed, before it reads the directory."""
    from heads.families import FAMILIES, Export

    return Export(path, FAMILIES["draft_lm"], {})
