import numpy as np
import pytest

from fragrel_integrations import ContextRelation, Fragment, FragmentStore, FragRelIndex, rerank
from fragrel_integrations.core.relation_aware import relation_aware_scores
from fragrel_integrations.core.relations import FragmentLayout, context_weights


def _cands():
    return [Fragment("alpha", "d", 4), Fragment("beta", "d", 5), Fragment("gamma", "e", 0)]


def test_base_scores_are_used_and_scored_by_eq_9_10():
    hits = rerank(
        "q", _cands(), relation=ContextRelation(0.5), alpha=0.5, k=3, scores=[0.2, 0.9, 0.5], outside="ignore"
    )
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


def test_missing_scores_fall_back_to_the_score_embedder_only(bow_embedder):
    kwargs = {"relation": ContextRelation(), "k": 1, "scores": [0.2, None, 0.5]}
    hits = rerank("gamma", _cands(), score_embedder=bow_embedder, **kwargs)
    assert hits[0].fragment.text == "gamma"
    assert hits[0].independent_score == pytest.approx(1.0, abs=1e-5)
    # an embedder for the relation never re-scores the pool: the base's ranking stays the independent score
    hits = rerank("gamma", _cands(), embedder=bow_embedder, **kwargs)
    assert (hits[0].fragment.text, hits[0].independent_score) == (_cands()[0].text, 1.0)


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


def test_floor_counts_positions_outside_the_pool_with_the_lowest_score():
    # w = 0.5: full weight 2 w / (1 - w) = 2; floor = 0.2 (the pool's lowest score)
    # alpha (d4): (0.5 * 0.9 + 0.2 * (2 - 0.5)) / 2 = 0.375; beta (d5): (0.5 * 0.2 + 0.2 * 1.5) / 2 = 0.2;
    # gamma (alone in e): 0.2 * 2 / 2 = 0.2
    hits = rerank("q", _cands(), relation=ContextRelation(0.5), alpha=0.5, k=3, scores=[0.2, 0.9, 0.5])
    env = {h.fragment.text: h.environment_score for h in hits}
    assert env == pytest.approx({"alpha": 0.375, "beta": 0.2, "gamma": 0.2})
    assert {h.fragment.text: h.score for h in hits} == pytest.approx({"alpha": 0.3875, "beta": 1.0, "gamma": 0.6})
    # w_rel = 1 has no finite full weight: the pool-only formula is used
    flat = rerank("q", _cands(), relation=ContextRelation(1.0), alpha=0.5, k=3, scores=[0.2, 0.9, 0.5])
    same = rerank(
        "q", _cands(), relation=ContextRelation(1.0), alpha=0.5, k=3, scores=[0.2, 0.9, 0.5], outside="ignore"
    )
    assert [h.score for h in flat] == [h.score for h in same]
    with pytest.raises(ValueError, match="outside"):
        rerank("q", _cands(), relation=ContextRelation(), k=1, scores=[1, 1, 1], outside="pool")


def test_scoreless_pool_is_ranked_and_cut_without_loading_a_model(monkeypatch):
    import fragrel_integrations.models.local as local

    monkeypatch.setattr(local, "default_cached_embedder", lambda: pytest.fail("no model may be loaded"))
    cands = [Fragment(f"t{i}", "d", 10 * i) for i in range(30)]  # far apart: environment = floor for all
    hits = rerank("q", cands, relation=ContextRelation(0.3), k=5)
    assert [h.fragment.text for h in hits] == ["t0", "t1", "t2", "t3", "t4"]
    assert [h.independent_score for h in hits] == pytest.approx([1.0, 0.95, 0.9, 0.85, 0.8])  # 1 - r / 20
    everything = rerank("q", cands, relation=ContextRelation(0.3), k=30)
    assert len(everything) == 30  # rank_pool_size(30) = 120 keeps all


def test_expanded_neighbours_get_the_pool_floor_not_a_new_scale(bow_embedder):
    store = FragmentStore()
    store.add([Fragment(f"w{i}", "d", i) for i in range(6)])
    hits = rerank(
        "q",
        [Fragment("w2", "d", 2), Fragment("w4", "d", 4)],
        relation=ContextRelation(0.5),
        k=10,
        scores=[0.9, 0.4],
        store=store,
        expand=1,
    )
    by = {h.fragment.position: h.independent_score for h in hits}
    assert by == {2: 0.9, 4: 0.4, 1: 0.4, 3: 0.4, 5: 0.4}


def test_top_m_rerank_of_a_pool_equals_the_index_on_the_whole_corpus():
    # with top_m, only the m best fragments lend support; a pool holding them gives the corpus-wide environment
    rng = np.random.default_rng(0)
    words = ["boat", "goat", "sea", "island", "fire", "rain"]
    texts = [" ".join(rng.choice(words, size=8)) for _ in range(200)]
    index = FragRelIndex.from_fragments(texts, scorer="bm25", relation=ContextRelation(0.2), alpha=1.0, top_m=10)
    s_ind, s_env, _ = index.scores("boat island")
    pool = [index.fragments[i] for i in np.argsort(-s_ind, kind="stable")[:50]]
    hits = rerank(
        "boat island",
        pool,
        relation=ContextRelation(0.2),
        alpha=1.0,
        scores=[s_ind[f.position] for f in pool],
        top_m=10,
    )
    assert len(hits) == 50
    for h in hits:
        if 10 <= h.fragment.position < 190:  # away from the document's ends, where the index has fewer neighbours
            assert h.environment_score == pytest.approx(s_env[h.fragment.position], abs=1e-9)
    assert any(h.environment_score > 0 for h in hits)


def test_top_m_must_be_a_positive_int_or_none():
    with pytest.raises(ValueError, match="top_m must be a positive int"):
        rerank("q", [Fragment("a", "d", 0)], relation=ContextRelation(0.3), top_m=0)
    with pytest.raises(ValueError, match="top_m must be a positive int"):
        FragRelIndex.from_fragments(["a"], scorer="bm25", top_m=-1)
