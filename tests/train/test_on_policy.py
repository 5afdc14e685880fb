"""On-policy distillation: the target scores the drafter's own drafts exactly as an offline forward
would, drafts come from the engine's proposer, EAGLE-3's steps read their own drafts, and a resumed
on-policy run ends where an uninterrupted one does."""

import pytest
import torch

from distill.config import DataConfig, SamplingConfig, TargetConfig
from distill.stage.run import distill
from distill.stage.shards import load_distilled
from heads.config import DraftLMConfig, Eagle3Config
from heads.draft_lm import DraftLM
from heads.eagle import Eagle3Drafter
from heads.vocab import build_draft_vocab, token_counts
from tests.train.loop_runs import run_loop
from train.config import TrainerConfig
from train.data import BatchOrder
from train.on_policy import (
    OnPolicy,
    branch_block,
    chain_starts,
    draft_lm_chains,
    draft_lm_rollout,
    score_branches,
    tree_logits,
)
from train.setups.draft_lm import DraftLMDistillation
from train.setups.eagle3 import Eagle3TrainingTimeTest

IDS = [0, 1, 2]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, micro_world):
    out = tmp_path_factory.mktemp("data")
    data = DataConfig(max_prompts=16, batch_size=8, shard_size=16, sampling=SamplingConfig(max_new_tokens=16))
    distill(TargetConfig(name_or_path="toyworld:micro"), data, out, "cpu")
    return load_distilled(out)


def _draft_lm(target, tokenizer):
    torch.manual_seed(0)
    cfg = DraftLMConfig(hidden_size=32, intermediate_size=64, num_attention_heads=1, num_key_value_heads=1)
    return DraftLM.from_config(cfg, target.config, tokenizer)


def _eagle(target, dataset):
    vocab, _ = build_draft_vocab(
        token_counts(dataset["input_ids"], dataset["loss_mask"], target.config.vocab_size), 200
    )
    torch.manual_seed(0)
    return Eagle3Drafter.from_target(Eagle3Config(layer_ids=IDS), target, vocab), vocab


def test_branch_logits_equal_a_plain_forward_over_the_drafted_sequence(target, dataset, tokenizer):
    batch = BatchOrder(dataset, 3, 512, tokenizer.pad_token_id, seed=0).batch(0)
    ids, attn = batch["input_ids"], batch["attention_mask"]
    assert len(set(attn.sum(1).tolist())) > 1  # ragged rows: right padding is part of what is checked
    anchors = torch.zeros_like(attn, dtype=torch.bool)
    anchors[0, [3, 10]] = True
    anchors[2, 5] = True
    g = torch.Generator().manual_seed(0)
    drafts = [torch.randint(0, target.config.vocab_size, ids.shape, generator=g) for _ in range(3)]
    tokens, parents, valid, node_of = branch_block(ids, attn, anchors, drafts)
    logits = score_branches(target, tokens, parents, valid)
    checked = 0
    for b, t in anchors.nonzero().tolist():
        for j in range(3):
            sequence = ids[b, : t + 2].tolist() + [int(drafts[i][b, t]) for i in range(j + 1)]
            with torch.no_grad():
                reference = target(input_ids=torch.tensor([sequence])).logits[0, -1]
            torch.testing.assert_close(logits[b, node_of[j][b, t]], reference, rtol=1e-4, atol=1e-4)
            checked += 1
        # the sequence's own nodes score the sequence as a plain forward does
    n = int(attn[1].sum())
    with torch.no_grad():
        plain = target(input_ids=ids[1:2, :n]).logits[0]
    torch.testing.assert_close(logits[1, :n], plain, rtol=1e-4, atol=1e-4)
    assert checked == 9 and (node_of[0][1] == -1).all()


def test_draft_lm_rollout_answers_each_prompt_with_the_drafters_greedy_continuation(target, dataset, tokenizer):
    drafter = _draft_lm(target, tokenizer).eval()
    batch = BatchOrder(dataset, 4, 512, tokenizer.pad_token_id, seed=0).batch(0)
    policy = OnPolicy(fraction=1.0, temperature=0.0, seed=0)
    out = draft_lm_rollout(drafter, batch, policy, len(tokenizer), tokenizer.pad_token_id, eos_ids=set())
    for b in range(4):
        old = batch["loss_mask"][b].bool() & batch["attention_mask"][b].bool()
        start, length = int(old.nonzero()[0]), int(old.sum())
        prompt = batch["input_ids"][b, :start]
        row = out["input_ids"][b, : int(out["attention_mask"][b].sum())]
        assert torch.equal(row[:start], prompt)  # the prompt is kept
        assert out["loss_mask"][b].tolist()[: len(row)] == [0] * start + [1] * length  # the answer alone counts
        sequence = prompt.tolist()  # reference: plain greedy decoding, full forward per token
        with torch.no_grad():
            for _ in range(length):
                sequence.append(
                    int(drafter(input_ids=torch.tensor([sequence])).logits[0, -1, : len(tokenizer)].argmax())
                )
        assert row.tolist() == sequence


def test_draft_lm_chains_are_the_drafters_greedy_continuations_from_every_answer_position(target, dataset, tokenizer):
    drafter = _draft_lm(target, tokenizer).eval()
    batch = BatchOrder(dataset, 3, 512, tokenizer.pad_token_id, seed=0).batch(0)
    ids, attn = batch["input_ids"], batch["attention_mask"]
    counts = (batch["loss_mask"][:, 1:] * attn[:, 1:]).bool()
    anchors = chain_starts(counts)
    assert anchors.sum() == counts[:, 1:].sum()  # every counted position but the first column starts a chain
    drafts = draft_lm_chains(drafter, batch, anchors, 3, OnPolicy(1.0, 0.0, seed=0), len(tokenizer))
    tokens, parents, valid, node_of = branch_block(ids, attn, anchors, drafts)
    grad_logits = tree_logits(drafter, tokens, parents, valid)
    assert grad_logits.requires_grad
    for b, t in anchors.nonzero().tolist()[::7]:
        sequence = ids[b, : t + 2].tolist()  # the chain continues the sequence after token t + 1
        with torch.no_grad():
            for j in range(3):
                logits = drafter(input_ids=torch.tensor([sequence])).logits[0, -1, : len(tokenizer)]
                if j:  # the drafter's logits at its own step-j node equal a plain forward over its path
                    torch.testing.assert_close(grad_logits[b, node_of[j - 1][b, t]], logits, rtol=1e-4, atol=1e-4)
                sequence.append(int(logits.argmax()))
                assert int(drafts[j][b, t]) == sequence[-1]


def test_chains_of_one_step_train_exactly_the_off_policy_positions(target, dataset, tokenizer):
    """γ = 1: each chain is the off-policy position itself, so the loss and gradients are off-policy's."""
    batch = BatchOrder(dataset, 3, 512, tokenizer.pad_token_id, seed=0).batch(0) | {"micro_step": torch.tensor(0)}
    assert not batch["loss_mask"][:, 1].any()  # no answer starts at position 1, so the first column never counts
    grads = {}
    for policy in (None, OnPolicy(1.0, 1.0, seed=0)):
        drafter = _draft_lm(target, tokenizer)
        objective = DraftLMDistillation(target, "tvd", len(tokenizer), acceptance_gamma=1, on_policy=policy)
        loss, metrics = objective(drafter, batch)
        loss.backward()
        grads[policy is None] = (loss.detach(), drafter.model.lm_head.weight.grad.clone(), metrics["on_policy"])
    torch.testing.assert_close(grads[True][0], grads[False][0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads[True][1], grads[False][1], rtol=1e-4, atol=1e-6)
    assert (grads[True][2], grads[False][2]) == (0, 1)


@pytest.mark.parametrize("loss", ["fkl", "al"])
def test_on_policy_chains_train_the_drafter_on_its_own_later_steps(target, dataset, tokenizer, loss):
    batch = BatchOrder(dataset, 3, 512, tokenizer.pad_token_id, seed=0).batch(0) | {"micro_step": torch.tensor(0)}
    drafter = _draft_lm(target, tokenizer)
    one = DraftLMDistillation(target, loss, len(tokenizer), acceptance_gamma=1, on_policy=OnPolicy(1.0, 0.0, seed=0))
    four = DraftLMDistillation(target, loss, len(tokenizer), acceptance_gamma=4, on_policy=OnPolicy(1.0, 0.0, seed=0))
    loss_one, _ = one(drafter, batch)
    loss_four, metrics = four(drafter, batch)
    loss_four.backward()
    assert metrics["on_policy"] == 1 and torch.isfinite(loss_four)
    assert drafter.model.lm_head.weight.grad.abs().sum() > 0
    if loss == "fkl":  # steps 2…4 add their own terms to step 1's
        assert loss_four > loss_one
    else:  # loss −E/γ; E = α1 (1 + α2 + α2 α3 + …) lies in (α1, 4 α1] for a chain of 4
        first, chain = -loss_one, -4 * loss_four
        assert first < chain <= 4 * first


def test_on_policy_samples_and_batches_depend_on_seed_and_micro_step_only():
    policy = OnPolicy(fraction=0.5, temperature=1.0, seed=3)
    picks = [policy.takes({"micro_step": torch.tensor(m)}) for m in range(200)]
    assert 70 < sum(picks) < 130 and picks == [policy.takes({"micro_step": torch.tensor(m)}) for m in range(200)]
    assert not policy.takes({})  # fixed batches (checkpoint selection) stay off-policy
    probs = torch.full((4, 50), 1 / 50)
    draw = lambda m: policy.draw(probs.log(), policy.generator({"micro_step": torch.tensor(m)}, "cpu"))  # noqa: E731
    assert torch.equal(draw(7), draw(7)) and not torch.equal(draw(7), draw(8))


def test_eagle_on_policy_steps_read_the_drafters_own_tokens(target, dataset, tokenizer):
    drafter, vocab = _eagle(target, dataset)
    batch = BatchOrder(dataset, 3, 512, tokenizer.pad_token_id, seed=0).batch(0) | {"micro_step": torch.tensor(0)}
    from distill.features.capture import layer_features

    features, _ = layer_features(target, batch["input_ids"], batch["attention_mask"], IDS)
    seen = []

    def feed(j, logits):
        seen.append(vocab.draft_to_target[logits.argmax(-1)])
        return seen[-1]

    with torch.no_grad():
        fed = drafter(features, batch["input_ids"], batch["attention_mask"], 3, feed)
        # step 1 reads the token step 0 drafted: the same as a step-0-only run's argmax, fed by hand
        first = drafter(features, batch["input_ids"], batch["attention_mask"], 1)[0]
    assert torch.equal(seen[0], vocab.draft_to_target[first.argmax(-1)])
    assert len(seen) == 2 and not torch.equal(seen[0], torch.nn.functional.pad(batch["input_ids"][:, 2:], (0, 1)))
    objective = Eagle3TrainingTimeTest(
        target, IDS, vocab.draft_to_target, ttt_steps=3, on_policy=OnPolicy(1.0, 0.0, seed=0)
    )
    loss, metrics = objective(drafter, batch)
    assert metrics["on_policy"] == 1 and torch.isfinite(loss)
    loss.backward()
    assert drafter.fc.weight.grad is not None and drafter.fc.weight.grad.abs().sum() > 0
    off_loss, off = Eagle3TrainingTimeTest(target, IDS, vocab.draft_to_target, ttt_steps=3)(drafter, batch)
    assert off["on_policy"] == 0 and torch.isclose(off["step0_loss"], metrics["step0_loss"])  # step 0 is shared
    assert not torch.isclose(off["step1_loss"], metrics["step1_loss"])  # later steps score the drafter's own chain
    assert fed[0].shape == first.shape


def _train(tmp, dataset, target, tokenizer, kind, *, stop_after=None):
    cfg = TrainerConfig(max_steps=6, batch_size=4, save_every=3, warmup_steps=2, lr=1e-2, log_every=1)
    policy = OnPolicy(fraction=0.5, temperature=1.0, seed=cfg.seed)
    if kind == "draft_lm_answers":
        policy = OnPolicy(fraction=0.5, temperature=1.0, seed=cfg.seed, rollout="answers")
    if kind == "eagle3":
        drafter, vocab = _eagle(target, dataset)
        objective = Eagle3TrainingTimeTest(target, IDS, vocab.draft_to_target, ttt_steps=3, loss="al", on_policy=policy)
    else:
        drafter = _draft_lm(target, tokenizer)
        objective = DraftLMDistillation(target, "al", len(tokenizer), on_policy=policy, pad_token_id=0)
    return run_loop(tmp, cfg, drafter, objective, dataset, tokenizer.pad_token_id, stop_after=stop_after)


@pytest.mark.parametrize("kind", ["draft_lm", "draft_lm_answers", "eagle3"])
def test_resumed_on_policy_training_ends_with_the_same_weights(tmp_path, dataset, target, tokenizer, kind):
    straight, log, _ = _train(tmp_path / "a", dataset, target, tokenizer, kind)
    _train(tmp_path / "b", dataset, target, tokenizer, kind, stop_after=4)  # killed after step 4; checkpoint: 3
    resumed, resumed_log, _ = _train(tmp_path / "b", dataset, target, tokenizer, kind)
    for k in straight:
        torch.testing.assert_close(straight[k], resumed[k], rtol=0, atol=0, msg=k)
    assert resumed_log == log
    assert '"on_policy": 1.0' in log and '"on_policy": 0.0' in log  # both kinds of micro-batch were trained on
