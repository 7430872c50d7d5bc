import numpy as np
import pytest

from fragrel_integrations import ContextRelation, Fragment, FragmentStore, rerank
from fragrel_integrations.core.relations import FragmentLayout, context_weights
from fragrel_integrations.core.scoring import relation_aware_scores


def _cands():
    return [Fragment("alpha", "d", 4), Fragment("beta", "d", 5), Fragment("gamma", "e", 0)]


def test_base_scores_are_used_and_scored_by_eq_9_10():
    hits = rerank("q", _cands(), relation=ContextRelation(0.5), alpha=0.5, k=3, scores=[0.2, 0.9, 0.5])
    expected = relation_aware_scores(
        np.array([0.2, 0.9, 0.5]), context_weights(FragmentLayout.from_fragments(_cands()), 0.5), 0.5
    )
    by_text = {h.fragment.text: h.score for h in hits}
    assert by_text == pytest.approx({"alpha": expected[0], "beta": expected[1], "gamma": expected[2]})
    assert [h.fragment.text for h in hits] == ["beta", "alpha", "gamma"]


def test_alpha_zero_keeps_base_order():
    hits = rerank("q", _cands(), relation=ContextRelation(0.9), alpha=0.0, k=3, scores=[0.2, 0.9, 0.5])
    assert [h.fragment.text for h in hits] == ["beta", "gamma", "alpha"]


def test_duplicates_are_dropped_and_empty_pool_is_empty():
    cands = [*_cands(), Fragment("beta", "d", 5)]
    hits = rerank("q", cands, relation=ContextRelation(), k=10, scores=[0.2, 0.9, 0.5, 0.9])
    assert len(hits) == 3
    assert rerank("q", [], relation=ContextRelation(), k=3) == []


def test_missing_scores_fall_back_to_embedder(bow_embedder):
    hits = rerank("gamma", _cands(), relation=ContextRelation(), k=1, scores=[0.2, None, 0.5], embedder=bow_embedder)
    assert hits[0].fragment.text == "gamma"
    assert hits[0].independent_score == pytest.approx(1.0, abs=1e-5)


def test_store_expansion_brings_neighbours(bow_embedder):
    store = FragmentStore()
    store.add([Fragment(t, "d", i) for i, t in enumerate(["intro", "the key is", "under the mat", "outro"])])
    hits = rerank(
        "where is the key",
        [Fragment("the key is", "d", 1)],
        relation=ContextRelation(0.5),
        k=3,
        embedder=bow_embedder,
        store=store,
        expand=1,
    )
    assert {h.fragment.text for h in hits} == {"intro", "the key is", "under the mat"}


def test_rerank_validates():
    with pytest.raises(ValueError, match="scores"):
        rerank("q", _cands(), relation=ContextRelation(), scores=[0.1])
    with pytest.raises(ValueError, match="finite"):
        rerank("q", _cands(), relation=ContextRelation(), scores=[0.1, float("nan"), 0.2])
    with pytest.raises(ValueError, match="k must"):
        rerank("q", _cands(), relation=ContextRelation(), scores=[0.1, 0.1, 0.2], k=0)
