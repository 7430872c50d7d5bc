import numpy as np
import pytest
import scipy.sparse as sp

from fragrel_integrations import relation_aware_scores
from fragrel_integrations.core.relation_aware import environment_from_sums, matrix_sums


def test_eq_9_10_hand_computed():
    s = np.array([0.9, 0.1, 0.5])
    w = np.array([[7.0, 1.0, 0.5], [1.0, 7.0, 0.0], [0.5, 0.0, 7.0]])  # diagonal must be ignored
    rel, env = relation_aware_scores(s, w, alpha=0.5, return_environment=True)
    # s_env_0 = (1*0.1 + 0.5*0.5) / 1.5 ; s_env_1 = 0.9 / 1 ; s_env_2 = 0.5*0.9 / 0.5
    expected_env = [0.35 / 1.5, 0.9, 0.9]
    np.testing.assert_allclose(env, expected_env)
    np.testing.assert_allclose(rel, s + 0.5 * np.array(expected_env))


def test_zero_denominator_gives_zero_environment():
    s = np.array([0.3, 0.7])
    rel, env = relation_aware_scores(s, np.zeros((2, 2)), alpha=2.0, return_environment=True)
    assert env.tolist() == [0.0, 0.0]
    assert rel.tolist() == s.tolist()


def test_sparse_equals_dense():
    rng = np.random.default_rng(1)
    w = rng.random((30, 30)) * (rng.random((30, 30)) < 0.2)
    s = rng.normal(size=30)
    np.testing.assert_allclose(relation_aware_scores(s, sp.csr_array(w), 0.7), relation_aware_scores(s, w, 0.7))
    np.testing.assert_allclose(relation_aware_scores(s, sp.coo_matrix(w), 0.7), relation_aware_scores(s, w, 0.7))


def test_alpha_zero_is_identity():
    s = np.array([0.2, 0.5, 0.1])
    assert relation_aware_scores(s, np.ones((3, 3)), alpha=0).tolist() == s.tolist()


@pytest.mark.parametrize(
    ("scores", "weights", "alpha", "exc", "match"),
    [
        ([np.nan, 1.0], np.ones((2, 2)), 0.5, ValueError, "finite"),
        ([np.inf, 1.0], np.ones((2, 2)), 0.5, ValueError, "finite"),
        ([1.0, 1.0], np.ones((3, 3)), 0.5, ValueError, "shape"),
        ([[1.0, 1.0]], np.ones((2, 2)), 0.5, ValueError, "1-D"),
        ([1.0, 1.0], -np.ones((2, 2)), 0.5, ValueError, ">= 0"),
        ([1.0, 1.0], np.full((2, 2), np.nan), 0.5, ValueError, "finite"),
        ([1.0, 1.0], np.ones((2, 2)), -0.1, ValueError, "alpha"),
        ([1.0, 1.0], np.ones((2, 2)), float("nan"), ValueError, "alpha"),
        ([1.0, 1.0], np.ones((2, 2)), True, TypeError, "alpha"),
        ([1.0, 1.0], np.ones((2, 2)), "0.5", TypeError, "alpha"),
        (["a", "b"], np.ones((2, 2)), 0.5, TypeError, "numbers"),
    ],
)
def test_bad_input(scores, weights, alpha, exc, match):
    with pytest.raises(exc, match=match):
        relation_aware_scores(scores, weights, alpha)


def test_matrix_sums_excludes_self():
    num, den = matrix_sums(np.full((2, 2), 2.0), np.array([1.0, 3.0]))
    assert num.tolist() == [6.0, 2.0] and den.tolist() == [2.0, 2.0]
    assert environment_from_sums(np.array([1.0, 1.0]), np.array([0.0, 2.0])).tolist() == [0.0, 0.5]
