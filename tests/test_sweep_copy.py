"""scripts/sweep_copy.py: the copy sweep trains with the builder's loop and scores answers exactly as documented."""

import json

import pytest
import torch

from tests.conftest import import_script

sweep_copy = import_script("sweep_copy")

# the chat world's recipe shrunk to seconds: a small corpus and target, two steps
SMALL = {"corpus_bytes": 200_000, "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128}
SMALL |= {"num_hidden_layers": 2, "num_attention_heads": 1, "batch_size": 2, "train_steps": 2, "num_chat_docs": 40}
SMALL |= {"warmup_steps": 1, "compile": False, "bf16": False}


class _Oracle(torch.nn.Module):
    """Predicts each next token right, except token `miss`: the accuracy is the share of answer tokens not `miss`."""

    def __init__(self, miss: int):
        super().__init__()
        self.miss, self.w = miss, torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids):
        nxt = torch.cat([input_ids[:, 1:], input_ids[:, :1]], 1)
        nxt = torch.where(nxt == self.miss, (nxt + 1) % 10, nxt)
        return type("Out", (), {"logits": torch.nn.functional.one_hot(nxt, 10).float()})


def test_answer_accuracy_scores_only_the_answer_tokens():
    rows = [([5, 6, 7, 3, 3, 4], 3), ([1, 2, 3, 4], 2)]  # answers: [3, 3, 4] and [3, 4]
    assert sweep_copy.answer_accuracy(_Oracle(miss=9), rows, bf16=False) == 1.0
    assert sweep_copy.answer_accuracy(_Oracle(miss=3), rows, bf16=False) == pytest.approx(2 / 5, abs=1e-4)
    assert sweep_copy.answer_accuracy(_Oracle(miss=7), rows, bf16=False) == 1.0  # 7 is in a prompt, not an answer


@pytest.mark.slow  # trains a toy target setting
def test_a_setting_prints_a_line_per_evaluation_point(tmp_path, capsys):
    settings = tmp_path / "sweep.json"
    settings.write_text(json.dumps([{"name": "small", **SMALL}]))
    out = tmp_path / "runs.jsonl"
    args = ["--settings", str(settings), "--device", "cpu", "--eval-every", "1", "--out", str(out)]
    assert sweep_copy.main(args) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["setting"], r["step"], r["tokens"]) for r in records] == [("small", 1, 2048), ("small", 2, 4096)]
    for r in records:
        assert {f"{k}_accuracy" for k in ("completion", "edit", "long_context", "multi_turn")} < set(r)
        assert 0 <= r["edit_accuracy"] < 0.2 and r["heldout_loss"] > 5  # two steps: nothing learnt yet
    assert "edit_greedy" not in records[0]  # greedy answers after the last step only
    for kind in ("completion", "edit", "long_context", "multi_turn"):
        assert set(records[1][f"{kind}_greedy"]) == {"copy_rate", "from_prompt", "loops"}
        assert all(0 <= v <= 1 for v in records[1][f"{kind}_greedy"].values())
    assert capsys.readouterr().out.count('"setting": "small"') == 2


def test_unknown_fields_and_worlds_are_refused(tmp_path, capsys):
    settings = tmp_path / "sweep.json"
    settings.write_text(json.dumps([{"name": "typo", "learning_rate": 1e-3}]))
    assert sweep_copy.main(["--settings", str(settings)]) == 2
    assert "only WorldConfig fields (unknown: ['learning_rate'])" in capsys.readouterr().err
    assert sweep_copy.main(["--settings", str(settings), "--world", "huge"]) == 2
    assert "--world 'huge' is not a toy world size" in capsys.readouterr().err
