"""PARD proposals: one drafter forward per step, lossless greedy and sampled decoding, the served
layout's first slot, the export round trip, and bad settings refused before any work."""

import pytest
import torch
from omegaconf import OmegaConf

from eval.config import EvalConfig
from eval.errors import EvalError
from eval.proposers import load_proposer
from eval.proposers.pard import PardProposer
from eval.sampling import SamplingParams
from eval.speculative import autoregressive_generate, speculative_generate
from heads.config import PardConfig
from heads.errors import HeadsError
from heads.families import read_export
from heads.pard import PardDrafter
from heads.vocab import pick_mask_token
from tests.eval.fitting import assert_first_tokens_follow_the_target, fit, sampled_text
from tests.exporting import export
from train.setups.pard import PardDistillation

GREEDY = SamplingParams()
MASK = 4  # <|system|> in the micro world: a special token its prompts never use


@pytest.fixture(scope="module")
def pard(target, tokenizer):
    """A small PARD drafter fitted briefly on the target's own text (K = 4)."""
    torch.manual_seed(0)
    cfg = PardConfig(hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=2)
    drafter = PardDrafter.from_config(
        PardConfig(**{**cfg.__dict__, "max_draft_tokens": 4}), target.config, tokenizer, pard_token=MASK
    )
    objective = PardDistillation(target, "fkl", 512, pard_token=MASK, max_draft_tokens=4, anchors_per_sequence=8)
    return fit(drafter, objective, sampled_text(target), steps=80)


def _proposer(drafter):
    return PardProposer(drafter.model, 512, drafter.pard_token, drafter.max_draft_tokens)


@pytest.mark.parametrize("rows", [1, 3])
def test_greedy_output_equals_the_target_with_one_drafter_forward_per_step(pard, target, prompt_ids, rows):
    prompts = [p[-30 + 7 * i :] for i, p in enumerate(prompt_ids[:rows])]  # ragged lengths
    expected = autoregressive_generate(target, prompts, 40, GREEDY, eos_ids=set(), vocab_size=512)
    out, stats = speculative_generate(target, _proposer(pard), prompts, 40, 4, GREEDY, eos_ids=set(), vocab_size=512)
    assert out == expected
    assert stats.draft_forwards == stats.target_forwards  # the whole block from one forward
    assert sum(stats.accept_counts) > 0


def test_a_drafter_identical_to_the_target_always_gets_its_first_slot_accepted(target, prompt_ids):
    # The bonus slot sees the exact verified prefix (vLLM's layout, VLLM-FORMATS §1): draft 1 is the
    # target's own next token, so every step accepts at least one token, whatever the masks say.
    proposer = PardProposer(target, 512, MASK, 4)
    out, stats = speculative_generate(target, proposer, [prompt_ids[0]], 30, 4, GREEDY, eos_ids=set(), vocab_size=512)
    assert out == autoregressive_generate(target, [prompt_ids[0]], 30, GREEDY, eos_ids=set(), vocab_size=512)
    assert min(stats.accept_counts[:-1]) >= 1


def test_sampled_first_token_follows_the_target(pard, target, prompt_ids):
    assert_first_tokens_follow_the_target(target, _proposer(pard), prompt_ids[0], 512)


def test_export_round_trip_proposes_the_same_blocks(pard, target, tokenizer, prompt_ids, tmp_path):
    out = export(pard, tmp_path / "pard", tokenizer=tokenizer)
    config = OmegaConf.load(out / "config.json")
    assert config.pard_token == MASK and config.max_draft_tokens == 4  # what vLLM reads, and our K
    proposer, kind = load_proposer(read_export(out), target, 512, EvalConfig(num_speculative_tokens=4), "cpu")
    assert kind == "pard" and proposer.max_num_speculative_tokens == 4
    original = _proposer(pard)
    for p in (original, proposer):
        p.reset(1, torch.device("cpu"))
    seq = [prompt_ids[1]]
    assert torch.equal(original.propose(seq, 4, GREEDY).draft_tokens, proposer.propose(seq, 4, GREEDY).draft_tokens)


def test_a_mask_id_outside_the_vocabulary_is_refused(target, tokenizer):
    with pytest.raises(HeadsError, match=r"drafter.pard_token=512 is outside the vocabulary \(0..511\)"):
        PardDrafter.from_config(PardConfig(hidden_size=64), target.config, tokenizer, pard_token=512)


def test_the_mask_token_is_an_unused_special_token_else_the_highest_unused_id():
    data = [[5, 6, 7, 1], [2, 3, 9]]
    assert pick_mask_token(data, 10, special_ids=[0, 1, 2, 4], exclude={0, 1}) == 4  # unused special token
    assert pick_mask_token(data, 10, special_ids=[0, 1, 2], exclude={0, 1}) == 8  # highest id never seen
    with pytest.raises(HeadsError, match="set drafter.mask_token_id to a reserved token"):
        pick_mask_token([list(range(4))], 4, special_ids=[], exclude=())


@pytest.mark.parametrize(
    ("override", "error", "message"),
    [
        ("drafter.pard_token=512", HeadsError, r"drafter.pard_token=512 is outside the vocabulary \(0..511\)"),
        ("drafter.pard_token=-1", HeadsError, r"drafter.pard_token=-1 must be a token id ≥ 0"),
        ("drafter.max_draft_tokens=1", HeadsError, r"drafter.max_draft_tokens=1 must be ≥ 2"),
        ("eval.num_speculative_tokens=9", EvalError, r"exceeds drafter.max_draft_tokens=8"),
        ("eval.tree=[2,1]", EvalError, r"this drafter proposes one block \(a chain\) per forward"),
    ],
)
def test_bad_settings_stop_the_run_before_any_work(override, error, message):
    from tests.test_families import _compose
    from train.stages.preflight import check_run

    cfg = OmegaConf.to_object(_compose("recipe=toy_pard", "target=micro", override))
    with pytest.raises(error, match=message) as e:
        check_run(cfg)
    assert "\n" not in str(e.value)


def test_reports_count_drafter_forwards_and_the_block_cost(pard, weak_draft, target, prompt_ids):
    from eval.metrics import Tally, add_block_cost, decode_figures
    from eval.proposers.draft_lm import DraftLMProposer

    ar = Tally(seconds=1.0, tokens=10)
    for proposer, forwards in ((_proposer(pard), 1.0), (DraftLMProposer(weak_draft, 512), 4.0)):
        tally = Tally()
        out, tally.stats = speculative_generate(
            target, proposer, [prompt_ids[2]], 20, 4, GREEDY, eos_ids=set(), vocab_size=512
        )
        tally.tokens, tally.seconds = len(out[0]), 1.0
        assert decode_figures(tally, ar, 4, is_chain=True)["draft_forwards_per_step"] == forwards
    sweep = [
        {"num_speculative_tokens": 1, "seconds_per_step": {"draft": 0.002}},
        {"num_speculative_tokens": 4, "seconds_per_step": {"draft": 0.0025}},
    ]
    add_block_cost(sweep)
    assert [row["block_cost"] for row in sweep] == pytest.approx([1.0, 1.25])
