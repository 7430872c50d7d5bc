"""The one FragRel pipeline (``scoring.fragrel_scores``) and the one scorer factory (``scorers.make_scorer``) that
the index, the re-ranker, SCM, the tree and the code index share."""

from __future__ import annotations

import numpy as np
import pytest

from fragrel_integrations.core.fragments import Fragment
from fragrel_integrations.core.relation_aware import fragrel_scores, matrix_sums, relation_aware_scores
from fragrel_integrations.core.relations import ContextRelation, FragmentLayout
from fragrel_integrations.core.scorers import (
    BM25Scorer,
    HybridScorer,
    JaccardScorer,
    check_scorer,
    code_scorer,
    cosine_similarities,
    make_scorer,
)
from fragrel_integrations.testing import HashingEmbedder

TEXTS = ["the cat sat on the mat", "a dog barked", "cats and dogs", "stock prices fell"]


def _ones(n: int):
    w = np.ones((n, n))
    return lambda s: matrix_sums(w, s)


def test_pipeline_is_eq_9_10_by_hand():
    s = np.array([1.0, 0.0, 0.5])
    env, rel = fragrel_scores(s, _ones(3), 0.5)
    assert env.tolist() == [0.25, 0.75, 0.5]  # mean of the other two
    assert rel.tolist() == [1.125, 0.375, 0.75]
    assert np.array_equal(rel, relation_aware_scores(s, np.ones((3, 3)), 0.5))


def test_pipeline_top_m_lends_support_only_from_the_best():
    s = np.array([0.9, 0.5, 0.75, 0.0])
    env, rel = fragrel_scores(s, _ones(4), 1.0, top_m=2)
    support = np.array([0.4, 0.0, 0.25, 0.0])  # how far each of the 2 best stands above the 3rd
    assert np.allclose(env, [(support.sum() - support[i]) / 3 for i in range(4)])
    assert np.allclose(rel, s + env)


def test_pipeline_full_weight_counts_missing_neighbours_at_the_floor():
    layout = FragmentLayout.from_fragments([Fragment("a", "d", 0), Fragment("b", "d", 1)])
    relation = ContextRelation(0.5)
    s = np.array([1.0, 0.2])
    full = relation.full_weight()  # 2 * (0.5 + 0.25 + ...) = 2
    env, _ = fragrel_scores(s, relation.prepare(layout).sums, 0.5, full_weight=full)
    # fragment 0 sees fragment 1 at weight 0.5; the other 1.5 of its full weight counts the floor 0.2
    assert env[0] == pytest.approx((0.5 * 0.2 + 1.5 * 0.2) / 2)
    assert env[1] == pytest.approx((0.5 * 1.0 + 1.5 * 0.2) / 2)
    plain, _ = fragrel_scores(s, relation.prepare(layout).sums, 0.5)
    assert plain == pytest.approx([0.2, 1.0])


def test_factory_builds_each_named_scorer_lazily():
    calls = []

    def dense():
        calls.append(1)
        return lambda q: np.arange(len(TEXTS), dtype=float)

    bm25 = make_scorer("bm25", TEXTS, dense=dense)
    assert isinstance(bm25, BM25Scorer) and calls == []  # no model built for BM25
    assert np.array_equal(make_scorer("dense", TEXTS, dense=dense)("cat"), np.arange(4.0))
    hybrid = make_scorer("hybrid", TEXTS, dense=dense)
    assert isinstance(hybrid, HybridScorer)
    expected = 0.5 * (BM25Scorer(TEXTS)("cat") / BM25Scorer(TEXTS)("cat").max()) + 0.5 * np.arange(4.0) / 3
    assert np.allclose(hybrid("cat"), expected)
    own = make_scorer(lambda q: np.zeros(4), TEXTS)
    assert own("x").tolist() == [0.0] * 4
    with pytest.raises(ValueError, match="needs embeddings"):
        make_scorer("dense", TEXTS)


def test_factory_hybrid_takes_another_lexical_half():
    hybrid = make_scorer("hybrid", TEXTS, dense=lambda: lambda q: np.zeros(4), lexical=lambda: JaccardScorer(TEXTS))
    jac = JaccardScorer(TEXTS)("cat sat")
    assert np.allclose(hybrid("cat sat"), 0.5 * (jac - jac.min()) / (jac.max() - jac.min()))


def test_scorer_names_are_checked_with_the_fix_in_the_message():
    check_scorer("dense")
    check_scorer(lambda q: q)
    with pytest.raises(ValueError, match=r"'dense', 'bm25', 'hybrid' or a callable, got 'cosine'"):
        check_scorer("cosine")
    with pytest.raises(ValueError, match=r"one of \['dense', 'bm25', 'hybrid'\], got"):
        check_scorer(lambda q: q, allow_callable=False)
    with pytest.raises(ValueError, match="'jaccard', 'bm25', 'dense', 'hybrid' or a callable"):
        code_scorer("tfidf", TEXTS)


def test_code_bm25_without_word_tokens_scores_zero():
    scorer = code_scorer("bm25", ["+ - *", "( )"])
    assert scorer("anything").tolist() == [0.0, 0.0]


def test_cosine_keeps_the_matrix_precision():
    emb = HashingEmbedder(dim=32)
    matrix = np.asarray(emb.embed_documents(TEXTS), dtype=np.float32) * 3.0
    q = np.asarray(emb.embed_query("cat on a mat"), dtype=np.float64)
    got = cosine_similarities(matrix, q)
    assert got.dtype == np.float64
    norms = np.linalg.norm(matrix.astype(np.float64), axis=1) * np.linalg.norm(q)
    assert np.allclose(got, (matrix.astype(np.float64) @ q) / norms, atol=1e-6)
    assert cosine_similarities(np.zeros((1, 3)), np.ones(3)).tolist() == [0.0]
