import torch

from eval.verify import greedy_verify, rejection_sample


def test_greedy_verify_accepts_the_matching_prefix():
    logits = torch.full((4, 5), -1.0)
    for pos, tok in enumerate([2, 3, 1, 4]):
        logits[pos, tok] = 1.0
    assert greedy_verify(logits, torch.tensor([2, 3, 0])) == (2, 1)
    assert greedy_verify(logits, torch.tensor([2, 3, 1])) == (3, 4)  # all accepted: bonus token
    assert greedy_verify(logits, torch.tensor([0, 3, 1])) == (0, 2)


def _first_token_distribution(p, q, draws):
    """Empirical distribution of the first emitted token when one draft token is drawn from q."""
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(p.shape[-1])
    target_probs = torch.stack([p, p])  # position 0 and the bonus position
    for _ in range(draws):
        d = torch.multinomial(q, 1, generator=gen)
        n, nxt = rejection_sample(target_probs, q.unsqueeze(0), d, generator=gen)
        counts[int(d) if n == 1 else nxt] += 1
    return counts / draws


def test_rejection_sampling_reproduces_the_target_distribution():
    # q has zeros where p has mass and mass where p has none: the hardest case for the residual.
    p = torch.tensor([0.5, 0.3, 0.2, 0.0, 0.0])
    q = torch.tensor([0.1, 0.0, 0.3, 0.4, 0.2])
    draws = 20000
    freq = _first_token_distribution(p, q, draws)
    # 5 standard errors of a binomial proportion: fails for a wrong rule, not by chance.
    tol = 5 * torch.sqrt(p * (1 - p) / draws) + 1e-9
    assert torch.all((freq - p).abs() <= tol), (freq, p)
    assert freq[3] == 0 and freq[4] == 0


def test_rejection_sampling_chain_emits_target_distribution_at_each_position():
    torch.manual_seed(1)
    V, gamma, draws = 4, 3, 4000
    p = torch.softmax(torch.randn(gamma + 1, V) * 2, -1)
    q = torch.softmax(torch.randn(gamma, V) * 2, -1)
    gen = torch.Generator().manual_seed(2)
    # Marginal of the first emitted token must be p[0] whatever q is.
    counts = torch.zeros(V)
    for _ in range(draws):
        d = torch.stack([torch.multinomial(q[i], 1, generator=gen)[0] for i in range(gamma)])
        n, nxt = rejection_sample(p, q, d, generator=gen)
        counts[int(d[0]) if n >= 1 else nxt] += 1
    freq = counts / draws
    tol = 5 * torch.sqrt(p[0] * (1 - p[0]) / draws)
    assert torch.all((freq - p[0]).abs() <= tol), (freq, p[0])


def test_identical_distributions_accept_everything():
    p = torch.softmax(torch.randn(3, 6), -1)
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        d = torch.stack([torch.multinomial(p[i], 1, generator=gen)[0] for i in range(2)])
        n, _ = rejection_sample(p, p[:2], d, generator=gen)
        assert n == 2
