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
