"""Which prompts eval measures (train/eval_prompts.py), and the gate's proof that none was trained on."""

import pytest

from distill.config import DataConfig
from distill.prompts.heldout import heldout_indices
from train.config import RunConfig
from train.errors import PipelineError
from train.eval_prompts import check_disjoint, eval_source, training_overlap

TRAINED = {"input_ids": [[1, 2, 3, 9, 9], [4, 5, 9]], "prompt_length": [3, 2]}  # prompts [1, 2, 3] and [4, 5]


def _cfg(**kw) -> RunConfig:
    data = kw.pop("data", {})
    return RunConfig(data=DataConfig(**data), **kw)


@pytest.mark.parametrize(
    "settings, source, split, holdout",
    [
        ({"data": {"prompts": "toyworld"}}, "toyworld", "heldout", False),
        ({"data": {"prompts": "mine.jsonl"}}, "mine.jsonl", "train", True),  # the slice held out of distillation
        ({"data": {"prompts": "org/set"}, "eval_split": "test"}, "org/set", "test", False),
        ({"data": {"prompts": "mine.jsonl"}, "eval_prompts": "other.jsonl"}, "other.jsonl", None, False),
    ],
)
def test_the_eval_source_follows_the_settings(settings, source, split, holdout):
    src = eval_source(_cfg(**settings))
    assert (src.source, src.split, src.holdout) == (source, split, holdout)


def test_the_held_out_draw_is_seeded_and_never_more_than_half_the_source():
    assert heldout_indices(100, 8, 0) == heldout_indices(100, 8, 0) != heldout_indices(100, 8, 1)
    assert len(heldout_indices(10, 64, 0)) == 5 and heldout_indices(10, 64, 0) == sorted(heldout_indices(10, 64, 0))


def test_the_gate_proves_the_measured_prompts_disjoint_from_the_training_prompts():
    measured = [[7, 8], [4, 5, 6]]  # [4, 5, 6] is not the trained prompt [4, 5]: a longer prompt, never trained on
    report = {"prompts": training_overlap(measured, TRAINED)}
    assert report["prompts"]["overlap"] == 0
    check_disjoint(report, [{"prompt_ids": ids} for ids in measured], TRAINED)
    with pytest.raises(PipelineError, match="does not hold the prompts the report names"):
        check_disjoint(report, [{"prompt_ids": [7, 8]}, {"prompt_ids": [4, 5]}], TRAINED)
    leaked = [[7, 8], [4, 5]]
    report = {"prompts": training_overlap(leaked, TRAINED)}
    assert report["prompts"]["overlap"] == 1
    with pytest.raises(PipelineError, match="1 of the measured prompts are in the distilled training data"):
        check_disjoint(report, [{"prompt_ids": ids} for ids in leaked], TRAINED)


def test_the_eval_source_reads_the_column_of_the_prompts_it_reads():
    data = {"prompts": "org/set", "prompts_column": "question"}
    assert eval_source(_cfg(data=data, eval_split="test")).column == "question"  # data.prompts: its column
    assert eval_source(_cfg(data=data)).as_dict()["column"] == "question"  # its held-out slice too
    other = eval_source(_cfg(data=data, eval_prompts="spec_bench.jsonl", eval_prompts_column="turns"))
    assert (other.source, other.column) == ("spec_bench.jsonl", "turns")
    with pytest.raises(PipelineError, match=r"^eval_prompts_column=turns names a column of eval_prompts, which is not"):
        eval_source(_cfg(data=data, eval_prompts_column="turns"))
