"""What trainer.max_seq_len cuts off the distilled data, measured before training (train/data.py length_cut)."""

import datasets
import pytest

from train.config import TrainerConfig
from train.data import collate, length_cut
from train.errors import PipelineError
from train.stages.train import check_length_cut


def _data(samples: list[tuple[int, int]]) -> datasets.Dataset:
    """Samples of (prompt tokens, answer tokens): the answer is the loss-masked tail, as distillation writes it."""
    rows = [{"input_ids": list(range(p + a)), "loss_mask": [0] * p + [1] * a} for p, a in samples]
    return datasets.Dataset.from_list(rows)


def test_the_cut_counts_the_answer_tokens_collate_drops():
    data = _data([(10, 6), (4, 4), (14, 10), (20, 2)])
    cut = length_cut(data, 16)
    # (10, 6) ends at 16: whole; (14, 10) keeps 2 of its 10; (20, 2) loses both answer tokens
    assert (cut.samples, cut.samples_cut, cut.answer_tokens, cut.answer_tokens_cut, cut.longest) == (4, 2, 22, 10, 24)
    batch = collate(data["input_ids"], data["loss_mask"], 16, 0)
    assert int(batch["loss_mask"].sum()) == cut.answer_tokens - cut.answer_tokens_cut  # what training sees
    assert length_cut(data, 24).answer_tokens_cut == 0 and length_cut(data, 24).samples_cut == 0


DEFAULT = TrainerConfig().max_cut_share


def test_a_large_cut_is_refused_a_small_one_said(capsys):
    with pytest.raises(PipelineError, match=r"trainer.max_seq_len=16 cuts 2 of 4 samples, and 45.5% of the answer"):
        check_length_cut(length_cut(_data([(10, 6), (4, 4), (14, 10), (20, 2)]), 16), DEFAULT)
    few = [(8, 8)] * 30 + [(15, 3)]  # 2 of 243 answer tokens cut: under the default share, a memory budget's price
    check_length_cut(length_cut(_data(few), 16), DEFAULT)
    out = capsys.readouterr().out
    assert "[train] warning: trainer.max_seq_len=16 cuts 1 of 31 samples, and 0.8% of the answer tokens" in out
    check_length_cut(length_cut(_data(few), 18), DEFAULT)
    assert capsys.readouterr().out == ""  # nothing cut, nothing said
    check_length_cut(length_cut(_data([(10, 6), (4, 4), (14, 10), (20, 2)]), 16), 0.5)  # accepted: said, not refused
    assert "45.5% of the answer tokens" in capsys.readouterr().out
