import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from fragrel_integrations import (
    CallableRelation,
    CompositeRelation,
    ContextRelation,
    Fragment,
    FragmentLayout,
    SemanticRelation,
)
from fragrel_integrations.core.relation_aware import matrix_sums
from fragrel_integrations.core.relations import context_weights


def _layout(docs, positions, embeddings=None):
    return FragmentLayout(np.asarray(docs, np.int64), np.asarray(positions, np.int64), (), embeddings)


def test_context_hand_computed():
    lay = FragmentLayout.from_fragments([Fragment("a", "d", 0), Fragment("b", "d", 1), Fragment("c", "e", 0)])
    num, den = ContextRelation(0.5).prepare(lay).sums(np.array([1.0, 2.0, 4.0]))
    assert num.tolist() == [1.0, 0.5, 0.0]  # other document contributes nothing
    assert den.tolist() == [0.5, 0.5, 0.0]


@settings(max_examples=200, deadline=None)
@given(
    data=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 60)), max_size=40, unique=True),
    w=st.one_of(st.sampled_from([0.0, 0.3, 0.8, 1.0]), st.floats(0, 1)),
    seed=st.integers(0, 2**16),
)
def test_context_recurrence_equals_dense_formula(data, w, seed):
    docs = [d for d, _ in data]
    pos = [p for _, p in data]
    s = np.random.default_rng(seed).normal(size=len(data))
    lay = _layout(docs, pos)
    num, den = ContextRelation(w).prepare(lay).sums(s)
    n2, d2 = matrix_sums(context_weights(lay, w), s)
    np.testing.assert_allclose(num, n2, atol=1e-9)
    np.testing.assert_allclose(den, d2, atol=1e-9)


def test_sparse_positions_use_exact_fallback():
    lay = _layout([0, 0, 0], [0, 10**9, 10**9 + 1])
    prepared = ContextRelation(0.5).prepare(lay)
    assert not prepared.use_grid
    num, den = prepared.sums(np.array([1.0, 2.0, 4.0]))
    n2, d2 = matrix_sums(context_weights(lay, 0.5), np.array([1.0, 2.0, 4.0]))
    np.testing.assert_allclose(num, n2)
    np.testing.assert_allclose(den, d2)


def test_w_rel_zero_has_no_environment():
    num, den = ContextRelation(0.0).prepare(_layout([0, 0, 0], [0, 1, 2])).sums(np.array([1.0, 2.0, 3.0]))
    assert not num.any() and not den.any()


@pytest.mark.parametrize("w", [-0.1, 1.5, float("nan")])
def test_w_rel_outside_unit_interval(w):
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        ContextRelation(w)


def test_w_rel_type():
    with pytest.raises(TypeError):
        ContextRelation("0.3")


def test_duplicate_positions_rejected():
    with pytest.raises(ValueError, match="unique"):
        ContextRelation(0.3).prepare(_layout([0, 0], [1, 1]))


def test_semantic_dense_and_sparse_agree_when_m_covers_all():
    rng = np.random.default_rng(0)
    e = rng.normal(size=(12, 5))
    s = rng.random(12)
    dense = SemanticRelation().prepare(_layout(range(12), [0] * 12, e)).sums(s)
    sparse = SemanticRelation(top_m=11).prepare(_layout(range(12), [0] * 12, e)).sums(s)
    np.testing.assert_allclose(dense[0], sparse[0], rtol=1e-5)
    np.testing.assert_allclose(dense[1], sparse[1], rtol=1e-5)
    en = e / np.linalg.norm(e, axis=1, keepdims=True)
    w = np.maximum(en @ en.T, 0)
    np.fill_diagonal(w, 0)
    np.testing.assert_allclose(dense[0], w @ s, rtol=1e-5)


def test_semantic_top_m_keeps_m_neighbours():
    rng = np.random.default_rng(0)
    e = rng.normal(size=(50, 8))
    graph = SemanticRelation(top_m=3).neighbour_graph(e / np.linalg.norm(e, axis=1, keepdims=True), 3)
    assert sp.issparse(graph) and graph.shape == (50, 50)
    assert (np.diff(graph.indptr) == 3).all()
    assert graph.diagonal().sum() == 0


def test_semantic_needs_embeddings():
    with pytest.raises(ValueError, match="embedder"):
        SemanticRelation().prepare(_layout([0], [0]))


def test_composite_is_weighted_sum_of_relations():
    lay = _layout([0, 0, 0], [0, 1, 2], np.eye(3))
    s = np.array([1.0, 2.0, 3.0])
    ctx, cst = ContextRelation(0.5), CallableRelation(lambda frs: np.ones((3, 3)))
    lay = FragmentLayout(lay.doc_codes, lay.positions, [Fragment(str(i)) for i in range(3)], None)
    num, den = CompositeRelation([(ctx, 2.0), (cst, 0.5)]).prepare(lay).sums(s)
    n1, d1 = ctx.prepare(lay).sums(s)
    n2, d2 = cst.prepare(lay).sums(s)
    np.testing.assert_allclose(num, 2 * n1 + 0.5 * n2)
    np.testing.assert_allclose(den, 2 * d1 + 0.5 * d2)


@pytest.mark.parametrize(
    "parts", [[], [(ContextRelation(), -1.0)], [("context", 1.0)], [(ContextRelation(), float("inf"))]]
)
def test_composite_validates(parts):
    with pytest.raises((ValueError, TypeError)):
        CompositeRelation(parts)


def test_callable_relation_must_be_callable():
    with pytest.raises(TypeError, match="callable"):
        CallableRelation(3)


@pytest.mark.parametrize("w", [1e-3, 0.2, 0.3, 0.8, 0.999, 1.0])
@pytest.mark.parametrize("n", [1, 2, 383, 5000, 20_001])
def test_decayed_cumsum_is_the_sequential_recurrence(w, n):
    """Bit for bit scipy's lfilter (rankings with tied scores must not change with the path taken)."""
    from scipy.signal import lfilter

    from fragrel_integrations.core.relations import decayed_cumsum

    rng = np.random.default_rng(n)
    x = rng.random(n) * (rng.random(n) < 0.5)
    want, acc = [], 0.0
    for value in x:
        acc = acc * w + value
        want.append(acc)
    np.testing.assert_allclose(decayed_cumsum(x, w), want, rtol=1e-12, atol=1e-300)
    np.testing.assert_array_equal(decayed_cumsum(x, w), lfilter([1.0], [1.0, -w], x))
