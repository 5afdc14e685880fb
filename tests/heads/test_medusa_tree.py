"""Per-head accuracy and Medusa's greedy tree construction, on hand-made examples."""

import pytest
import torch

from heads.medusa_tree import build_tree, expected_tau, full_tree, rank_accuracy, tree_parents


def test_rank_accuracy_on_a_hand_made_example():
    logits = torch.tensor(
        [
            [0.0, 5.0, 1.0, 2.0],  # ranking 1, 3, 2, 0
            [3.0, 0.0, 2.0, 1.0],  # ranking 0, 2, 3, 1
            [0.0, 1.0, 2.0, 3.0],  # ranking 3, 2, 1, 0
            [1.0, 0.0, 0.5, 0.2],  # ranking 0, 2, 3, 1
        ]
    )
    labels = torch.tensor([1, 2, 0, 1])  # ranks 0, 1, 3, 3
    torch.testing.assert_close(rank_accuracy(logits, labels, 3), torch.tensor([0.25, 0.25, 0.0]))
    torch.testing.assert_close(rank_accuracy(logits, labels, 4).cumsum(0), torch.tensor([0.25, 0.5, 0.5, 1.0]))
    torch.testing.assert_close(rank_accuracy(logits, labels, 6)[4:], torch.zeros(2))  # ranks beyond V: never
    assert rank_accuracy(logits[:0], labels[:0], 3).tolist() == [0.0, 0.0, 0.0]


def test_greedy_tree_takes_the_most_likely_nodes_first():
    accuracy = [[0.6, 0.3], [0.5, 0.2]]
    # node scores: (0,) .6  (1,) .3  (0,0) .30  (0,1) .12  (1,0) .15  (1,1) .06
    assert build_tree(accuracy, 1) == [(0,)]
    assert build_tree(accuracy, 3) == [(0,), (1,), (0, 0)]  # ties go to the smaller path
    assert build_tree(accuracy, 4) == [(0,), (1,), (0, 0), (1, 0)]
    assert build_tree(accuracy, 10) == [(0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1)]  # the whole space
    assert expected_tau(build_tree(accuracy, 4), accuracy) == pytest.approx(1 + 0.6 + 0.3 + 0.3 + 0.15)


def test_a_child_never_precedes_its_parent_even_when_it_scores_higher():
    accuracy = [[0.1, 0.05], [1.0, 0.0]]  # (0,0) scores as high as (0,)
    tree = build_tree(accuracy, 3)
    assert tree == [(0,), (1,), (0, 0)] and tree_parents(tree) == [-1, -1, 0]


def test_tree_parents_and_full_trees():
    tree = full_tree([3, 2, 1])
    assert len(tree) == 3 + 6 + 6
    parents = tree_parents(tree)
    assert all(p == -1 or tree[p] == node[:-1] for node, p in zip(tree, parents))
    with pytest.raises(ValueError, match="not closed under prefixes"):
        tree_parents([(0,), (1, 0)])
