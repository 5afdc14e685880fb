"""DSpark: the anchor-first blocks, the Markov head applied left to right on the drafts, the confidence head's
adaptive length, the export in vLLM's and llama.cpp's layout, and the settings checks."""

import json

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

from distill.features.capture import layer_features
from eval.errors import EvalError
from eval.proposer import TargetFeatures
from eval.proposers.dspark import DSparkProposer, kept_drafts
from eval.sampling import SamplingParams
from heads.config import DSparkConfig
from heads.dspark import DSparkDrafter
from heads.errors import HeadsError
from heads.families import FAMILIES, read_export
from tests.exporting import export
from tests.test_families import _compose
from train.config import TrainerConfig
from train.setups.block import anchor_blocks
from train.setups.dspark import DSparkDenoising
from train.stages.preflight import check_run

MASK = 3
LAYERS = [1, 2]


def _drafter(target, confidence=True) -> DSparkDrafter:
    """A random drafter with a non-zero Markov head (a fresh one's markov_w2 is zero)."""
    torch.manual_seed(0)
    cfg = DSparkConfig(layer_ids=LAYERS, block_size=5, markov_rank=8, confidence_head=confidence)
    drafter = DSparkDrafter.from_target(cfg, target, MASK)
    with torch.no_grad():
        drafter.markov_head.markov_w2.weight.normal_(0, 3.0)
    return drafter.eval()


def _proposer(drafter, target, ids, confidence_min=None) -> DSparkProposer:
    """A proposer whose context holds the target's features of ids[:-1]."""
    features, _ = layer_features(target, torch.tensor([ids[:-1]]), None, LAYERS)
    proposer = DSparkProposer(drafter, target.config.vocab_size, confidence_min)
    proposer.reset(1, torch.device("cpu"))
    proposer.accept([len(ids) - 1], TargetFeatures(features, torch.ones(1, len(ids) - 1, dtype=torch.bool)))
    return proposer


def test_anchor_first_blocks_train_every_slot_on_the_next_token():
    ids = torch.arange(10, 20)[None]
    attn, loss = torch.ones(1, 10, dtype=torch.long), torch.zeros(1, 10, dtype=torch.long)
    loss[0, 5:] = 1  # anchors: the 4 positions whose token and next token are the assistant's
    b = anchor_blocks(ids, attn, loss, block_size=3, num_anchors=4, mask_token_id=MASK, anchor_first=True)
    assert b.first_slot == 0 and b.anchors[0].tolist() == [5, 6, 7, 8]
    assert b.tokens[0, :3].tolist() == [15, MASK, MASK]  # the anchor x_t, then masks
    assert b.label_positions[0].tolist() == [[6, 7, 8], [7, 8, 9], [8, 9, 10], [9, 10, 11]]  # slot k → t + k + 1
    assert b.label_valid[0].tolist()[-2:] == [[True, True, False], [True, False, False]]  # 10, 11: past the end
    prev = DSparkDenoising.model_inputs(None, b, ids)[0]
    assert prev[0, :3].tolist() == [15, 16, 17]  # the Markov head reads the true token before each label


def test_drafts_apply_the_markov_head_left_to_right_on_the_drafts(target, prompt_ids):
    drafter, ids = _drafter(target), prompt_ids[0]
    proposal = _proposer(drafter, target, ids).propose([ids], 4, SamplingParams())
    # the reference: the block's slot logits, then each draft's Markov bias from the draft before it
    proposer = _proposer(drafter, target, ids)
    with torch.no_grad():
        base = drafter.head(proposer.block_hidden([ids], 4))[0]
        w1, w2 = drafter.markov_head.markov_w1.weight, drafter.markov_head.markov_w2.weight
        prev, expected = ids[-1], []
        for i in range(4):
            prev = int((base[i] + w2 @ w1[prev]).argmax())
            expected.append(prev)
    assert proposal.draft_tokens[0].tolist() == expected
    without = [int(base[i].argmax()) for i in range(4)]
    assert expected != without  # the head changed the chain: the test tells the two apart


def test_adaptive_length_keeps_the_drafts_before_the_first_low_confidence_one(target, prompt_ids):
    confidence = torch.tensor([[0.9, 0.8, 0.2, 0.9], [0.1, 0.9, 0.9, 0.9], [0.9, 0.9, 0.9, 0.9]])
    assert kept_drafts(confidence, 0.5).tolist() == [2, 0, 4]  # none: that step decodes one token
    drafter, ids = _drafter(target), prompt_ids[0]
    proposal = _proposer(drafter, target, ids, confidence_min=0.5).propose([ids], 4, SamplingParams())
    proposer = _proposer(drafter, target, ids)
    with torch.no_grad():
        hidden = proposer.block_hidden([ids], 4)
        prev = torch.tensor([[ids[-1], *proposal.draft_tokens[0, :3].tolist()]])
        estimate = drafter.confidence(hidden, drafter.markov_head.embed(prev)).sigmoid()
    assert proposal.num_draft.tolist() == kept_drafts(estimate, 0.5).tolist()


def test_export_is_vllms_and_llama_cpps_layout_and_round_trips(tmp_path, target, prompt_ids):
    drafter = _drafter(target)
    out = export(drafter, tmp_path / "d")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["Qwen3DSparkModel"] and config["model_type"] == "qwen3"
    assert config["sample_from_anchor"] is True and "dflash_config" not in config  # it would outrank the top level
    assert config["eagle_aux_hidden_state_layer_ids"] == LAYERS and config["target_layer_ids"] == [0, 1]
    assert config["mask_token_id"] == MASK and config["markov_rank"] == 8 and config["markov_head_type"] == "vanilla"
    assert config["draft_vocab_size"] == config["vocab_size"] == target.config.vocab_size
    assert config["enable_confidence_head"] and config["confidence_head_with_markov"]
    assert config["logit_scale"] == 1.0 and config["layer_types"] == ["full_attention"]
    names = set(load_file(out / "model.safetensors"))
    assert {"markov_head.markov_w1.weight", "markov_head.markov_w2.weight", "hidden_norm.weight", "fc.weight"} <= names
    assert {"confidence_head.proj.weight", "confidence_head.proj.bias"} <= names
    assert not any(n.startswith(("model.", "embed_tokens", "lm_head")) for n in names)
    family = read_export(out).family
    assert family is FAMILIES["dspark"]
    loaded = family.load(out, target)
    ids = prompt_ids[1]
    proposals = [_proposer(d, target, ids).propose([ids], 5, SamplingParams()).draft_tokens for d in (drafter, loaded)]
    assert torch.equal(*proposals)


def test_an_export_that_does_not_say_anchor_first_is_refused(tmp_path, target):
    out = export(_drafter(target), tmp_path / "d")
    config = json.loads((out / "config.json").read_text())
    del config["sample_from_anchor"]  # speculators' parser would read false: every draft one position off
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(HeadsError, match=r"sample_from_anchor=None .*: this drafter was trained anchor-first"):
        FAMILIES["dspark"].lint(out)


def test_the_confidence_head_learns_each_slots_acceptance(target):
    from tests.eval.dflash_fit import fit_dspark
    from tests.eval.fitting import sampled_text

    drafter = fit_dspark(target)
    objective = DSparkDenoising(
        target,
        LAYERS,
        settings=DSparkConfig(layer_ids=LAYERS, block_size=4, markov_rank=16),
        mask_token_id=MASK,
        loss="tvd",
        vocab_size=target.config.vocab_size,
        trainer=TrainerConfig(),
    )
    batch = sampled_text(target, seed=1)  # unseen text
    errors = []
    for head in (drafter.confidence_head, None):
        if head is None:  # the same drafter with a fresh, untrained confidence head
            torch.manual_seed(2)
            drafter.confidence_head.proj.reset_parameters()
        torch.manual_seed(1)
        with torch.no_grad():
            errors.append(float(objective(drafter, batch)[1]["conf_err"]))
    assert errors[0] < 0.8 * errors[1], (
        errors
    )  # measured: 0.168 vs 0.232  # |estimate − Σ min(p, q)|, fitted vs untrained


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("drafter.markov_rank=0", r"drafter.markov_rank=0 must be ≥ 1"),
        ("drafter.ce_weight=1.5", r"drafter.ce_weight=1.5 is out of range"),
        ("drafter.layer_ids=[1,3]", r"ids in 1..2 for this 2-layer target"),
    ],
)
def test_bad_settings_stop_the_run_before_any_work(override, message):
    cfg = OmegaConf.to_object(_compose("recipe=toy_dspark", "target=micro", "drafter.layer_ids=[1,2]", override))
    with pytest.raises(HeadsError, match=message) as e:
        check_run(cfg)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("recipe", "override", "message"),
    [
        ("toy_dspark", "eval.num_speculative_tokens=8", r"exceeds drafter.block_size=7"),
        ("toy_dspark", "eval.draft_confidence_min=1.5", r"draft_confidence_min=1.5 is not a probability"),
        ("toy_dspark", "drafter.confidence_head=false", r"this DSpark drafter has no confidence head"),
        ("toy_dflash", "eval.draft_confidence_min=0.3", r"needs a drafter with a confidence head \(dspark\)"),
    ],
)
def test_eval_settings_the_drafter_rules_out_stop_the_run(recipe, override, message):
    extra = ["eval.draft_confidence_min=0.3"] if "confidence_head=false" in override else []
    cfg = OmegaConf.to_object(_compose(f"recipe={recipe}", "target=micro", "drafter.layer_ids=[1,2]", override, *extra))
    with pytest.raises(EvalError, match=message):
        check_run(cfg)


@pytest.mark.parametrize("recipe", ["toy_dspark", "toy_dflash2"])
def test_serving_with_vllm_on_a_cpu_is_refused_as_needing_its_gpu_runner(recipe, monkeypatch):
    import train.stages.preflight
    from train.errors import PipelineError

    monkeypatch.setattr(train.stages.preflight, "missing_reason", lambda engine: None)  # as where vLLM is installed

    if torch.cuda.is_available():
        pytest.skip("a GPU: vLLM's V2 runner serves these families")
    cfg = OmegaConf.to_object(
        _compose(f"recipe={recipe}", "target=micro", "drafter.layer_ids=[1,2]", "eval.serve=vllm")
    )
    with pytest.raises(PipelineError, match=r"eval.serve=vllm: needs vLLM's GPU runner: vLLM 0.32 serves D"):
        check_run(cfg)
