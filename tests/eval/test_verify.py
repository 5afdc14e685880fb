import torch

from eval.verify import greedy_verify, rejection_sample, tree_greedy_verify, tree_rejection_sample, typical_verify


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


def _random_tree(gen, num_nodes):
    """Parents in topological order: node j hangs under −1 (root) or an earlier node."""
    return torch.tensor([int(torch.randint(-1, j, (1,), generator=gen)) if j else -1 for j in range(num_nodes)])


def _brute_force_greedy(target_logits, tokens, parents):
    """Check every root-to-node path on its own; keep the deepest all-argmax one."""
    argmax = target_logits.argmax(-1).tolist()
    best, best_path = -1, []
    for node in range(len(tokens)):
        path, j = [], node
        while j >= 0:
            path.append(j)
            j = int(parents[j])
        path.reverse()
        if all(int(tokens[j]) == argmax[int(parents[j]) + 1] for j in path) and len(path) > len(best_path):
            best, best_path = node, path
    return best_path, argmax[best + 1]


def test_tree_greedy_verify_accepts_what_brute_force_accepts():
    gen = torch.Generator().manual_seed(0)
    lengths = []
    for _ in range(500):
        n, vocab = int(torch.randint(1, 12, (1,), generator=gen)), 3  # tiny vocab: many matches
        parents = _random_tree(gen, n)
        tokens = torch.randint(0, vocab, (n,), generator=gen)
        logits = torch.randn(n + 1, vocab, generator=gen)
        assert tree_greedy_verify(logits, tokens, parents) == _brute_force_greedy(logits, tokens, parents)
        lengths.append(len(_brute_force_greedy(logits, tokens, parents)[0]))
    assert max(lengths) >= 3 and min(lengths) == 0  # deep acceptances and full rejections were both tested


def test_tree_greedy_verify_on_a_chain_equals_chain_verify():
    gen = torch.Generator().manual_seed(1)
    for _ in range(200):
        tokens = torch.randint(0, 3, (4,), generator=gen)
        logits = torch.randn(5, 3, generator=gen)
        path, nxt = tree_greedy_verify(logits, tokens, torch.arange(-1, 3))
        assert (len(path), nxt) == greedy_verify(logits, tokens)


def test_tree_rejection_sampling_emits_the_target_distribution():
    """Root with 3 i.i.d. children, each with 2 i.i.d. children: every emitted token follows p.

    The first emitted token must follow p at the root; given a first token x accepted from the
    tree, the second must follow p after x. q has zeros where p has mass and vice versa.
    """
    gen = torch.Generator().manual_seed(3)
    vocab, draws = 4, 30000
    p_root = torch.tensor([0.45, 0.35, 0.2, 0.0])
    p_next = torch.softmax(torch.randn(vocab, vocab, generator=gen) * 2, -1)  # p after token x
    p_next[1] = torch.tensor([0.0, 0.5, 0.5, 0.0])
    q_root = torch.tensor([0.1, 0.0, 0.4, 0.5])
    q_next = torch.softmax(torch.randn(vocab, vocab, generator=gen), -1)
    parents = torch.tensor([-1, -1, -1, 0, 0, 1, 1, 2, 2])
    first = torch.zeros(vocab)
    second = torch.zeros(vocab, vocab)
    for _ in range(draws):
        top = torch.multinomial(q_root, 3, replacement=True, generator=gen)  # independent siblings
        below = torch.stack(
            [torch.multinomial(q_next[int(x)], 2, replacement=True, generator=gen) for x in top]
        ).flatten()
        tokens = torch.cat([top, below])
        target_probs = torch.cat([p_root[None], p_next[tokens]])  # (N+1, V): p after each node
        draft_probs = torch.cat([q_root.expand(3, -1), q_next[top].repeat_interleave(2, 0)])
        path, nxt = tree_rejection_sample(target_probs, draft_probs, tokens, parents, gen)
        emitted = [int(tokens[j]) for j in path] + [nxt]
        first[emitted[0]] += 1
        if path:  # the first token came from the tree: what follows is p after it
            second[emitted[0], emitted[1]] += 1
    freq = first / draws
    assert torch.all((freq - p_root).abs() <= 5 * torch.sqrt(p_root * (1 - p_root) / draws) + 1e-9), (freq, p_root)
    assert first[3] == 0 and second[1].sum() == 0 and second[3].sum() == 0
    for x in (0, 2):  # the tokens q can draft and p can accept
        n = second[x].sum()
        assert n > 1000
        cond = second[x] / n
        assert torch.all((cond - p_next[x]).abs() <= 5 * torch.sqrt(p_next[x] * (1 - p_next[x]) / n) + 1e-9), (
            x,
            cond,
            p_next[x],
        )


def test_tree_rejection_with_point_mass_candidates_emits_the_target_distribution():
    """Deterministic siblings (a drafter's top-3, EAGLE-2 style) passed as point masses stay exact.

    Passing the drafter's q for such candidates instead would over-accept its favourite tokens:
    that biased variant must fail the same check, so the test can tell the two apart.
    """
    gen = torch.Generator().manual_seed(5)
    p = torch.tensor([0.1, 0.2, 0.3, 0.4])
    q = torch.tensor([0.5, 0.3, 0.2, 0.0])  # the drafter's distribution; its top-3 are tokens 0, 1, 2
    tokens, parents, draws = torch.tensor([0, 1, 2]), torch.tensor([-1, -1, -1]), 20000
    target_probs = torch.cat([p[None], torch.full((3, 4), 0.25)])

    def first_token_freq(draft_probs):
        counts = torch.zeros(4)
        for _ in range(draws):
            path, nxt = tree_rejection_sample(target_probs, draft_probs, tokens, parents, gen)
            counts[int(tokens[path[0]]) if path else nxt] += 1
        return counts / draws

    bound = 5 * torch.sqrt(p * (1 - p) / draws)
    exact = first_token_freq(torch.nn.functional.one_hot(tokens, 4).float())
    assert torch.all((exact - p).abs() <= bound), exact
    biased = first_token_freq(q.expand(3, -1))
    assert not torch.all((biased - p).abs() <= bound), biased


def test_typical_acceptance_takes_the_longest_typical_path():
    # Root: confident on token 0 → only token 0 passes; node 0's distribution is flat → a lower bar.
    target_probs = torch.tensor([[0.9, 0.05, 0.05], [0.4, 0.35, 0.25], [0.3, 0.3, 0.4], [0.34, 0.33, 0.33]])
    tokens, parents = torch.tensor([0, 1, 2]), torch.tensor([-1, -1, 0])  # nodes: 0 (root→0), 1 (root→1), 2 (0→2)
    path, _ = typical_verify(target_probs, tokens, parents, threshold=0.09, alpha=0.3)
    assert path == [0, 2]  # p(1 | root) = 0.05 is below min(0.09, 0.3·e^−H) and is rejected
    path, nxt = typical_verify(
        target_probs,
        torch.tensor([1, 1, 2]),
        parents,
        threshold=0.09,
        alpha=0.3,
        generator=torch.Generator().manual_seed(0),
    )
    assert path == [] and nxt in (0, 1, 2)
