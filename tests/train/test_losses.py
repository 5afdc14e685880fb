import math

import pytest
import torch

from train.losses import kd_loss

# Two positions, vocab 3; probabilities chosen so the values can be worked out by hand.
P = torch.tensor([[0.5, 0.25, 0.25], [0.9, 0.05, 0.05]])
Q = torch.tensor([[0.25, 0.5, 0.25], [0.9, 0.05, 0.05]])
TEACHER, STUDENT = P.log(), Q.log()  # log-probs are valid logits


def test_forward_kl():
    expected0 = 0.5 * math.log(0.5 / 0.25) + 0.25 * math.log(0.25 / 0.5)
    torch.testing.assert_close(kd_loss("fkl", STUDENT, TEACHER, None), torch.tensor([expected0, 0.0]))


def test_reverse_kl():
    expected0 = 0.25 * math.log(0.25 / 0.5) + 0.5 * math.log(0.5 / 0.25)
    torch.testing.assert_close(kd_loss("rkl", STUDENT, TEACHER, None), torch.tensor([expected0, 0.0]))


def test_tvd():
    torch.testing.assert_close(kd_loss("tvd", STUDENT, TEACHER, None), torch.tensor([0.25, 0.0]))


@pytest.mark.parametrize("beta", [0.5, 0.2])
def test_generalised_jsd(beta):
    p, q = P[0], Q[0]
    m = beta * p + (1 - beta) * q
    expected0 = beta * float((p * (p / m).log()).sum()) + (1 - beta) * float((q * (q / m).log()).sum())
    torch.testing.assert_close(kd_loss("jsd", STUDENT, TEACHER, None, beta=beta), torch.tensor([expected0, 0.0]))


def test_cross_entropy_on_sampled_tokens():
    labels = torch.tensor([1, 0])
    torch.testing.assert_close(kd_loss("ce", STUDENT, None, labels), torch.tensor([-math.log(0.5), -math.log(0.9)]))


def test_unknown_loss():
    with pytest.raises(ValueError, match="unknown loss 'kl'"):
        kd_loss("kl", STUDENT, TEACHER, None)


# --- acceptance-aimed losses ---------------------------------------------------------------------


def test_acceptance_rate_is_the_overlap_of_p_and_q():
    # position 0: min(.5,.25) + min(.25,.5) + min(.25,.25) = 0.75 = 1 − TVD; position 1: identical → 1
    from train.losses import acceptance_rate

    torch.testing.assert_close(acceptance_rate(Q, P), torch.tensor([0.75, 1.0]))


def test_chain_accepted_length_by_hand():
    from train.losses import chain_accepted_length

    alphas = torch.tensor([[0.8, 1.0], [0.5, 1.0], [0.25, 0.0]])  # 3 steps × 2 chains
    # chain 0: 0.8 + 0.8·0.5 + 0.8·0.5·0.25 = 1.3; chain 1: 1 + 1 + 0 (the last step is always rejected)
    torch.testing.assert_close(chain_accepted_length(alphas), torch.tensor([1.3, 2.0]))


def test_sequence_accepted_length_cuts_chains_at_invalid_positions():
    from train.losses import sequence_accepted_length

    alpha = torch.tensor([[0.5, 0.5, 0.5, 0.9, 0.9]])
    valid = torch.tensor([[True, True, True, False, True]])
    got = sequence_accepted_length(alpha, valid, gamma=2)
    # t=0: .5 + .25; t=1: .5 + .25; t=2: .5 + .5·0 (t=3 invalid); t=3: invalid start → 0; t=4: .9 (sequence end)
    torch.testing.assert_close(got, torch.tensor([[0.75, 0.75, 0.5, 0.0, 0.9]]))


def test_acceptance_length_loss_value_and_gradient_sign():
    """−E[accepted]/γ by hand; a step along −grad raises q on the token p prefers (and the loss falls)."""
    from train.losses import acceptance_length_loss, acceptance_rate, chain_accepted_length

    p = torch.tensor([[0.7, 0.2, 0.1], [0.6, 0.3, 0.1]])  # the target at chain steps 1 and 2
    logits = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], requires_grad=True)  # q uniform at both steps
    alphas = acceptance_rate(logits.softmax(-1), p)  # (2,)
    loss = acceptance_length_loss(chain_accepted_length(alphas[:, None]), gamma=2)  # one chain
    a1 = 1 / 3 + 0.2 + 0.1  # min(1/3, .7) + min(1/3, .2) + min(1/3, .1)
    a2 = 1 / 3 + 0.3 + 0.1
    torch.testing.assert_close(loss, torch.tensor([-(a1 + a1 * a2) / 2]))
    loss.sum().backward()
    assert logits.grad[0, 0] < 0 and logits.grad[1, 0] < 0  # descending raises q(token 0), the target's favourite
    with torch.no_grad():
        stepped = logits - 0.5 * logits.grad
        after = acceptance_length_loss(chain_accepted_length(acceptance_rate(stepped.softmax(-1), p)[:, None]), 2)
    assert after < loss


def test_al_is_refused_as_a_per_position_loss():
    with pytest.raises(ValueError, match="needs chains"):
        kd_loss("al", STUDENT, TEACHER, None)
