import numpy as np
import pytest

from fragrel_integrations import ContextRelation, Fragment, FragRelIndex, SemanticRelation
from fragrel_integrations.core.relation_aware import relation_aware_scores
from fragrel_integrations.core.relations import context_weights

STORY = [
    "Tom walked into the old kitchen.",
    "He found a rusty key under the mat.",
    "The key opened the cellar door.",
    "Meanwhile Anna baked bread in town.",
    "The bakery smelled of cinnamon.",
]


def _fixed_scorer(values):
    return lambda query: np.asarray(values, dtype=float)


def test_scores_follow_eq_9_10_on_the_index(bow_embedder):
    s = [0.9, 0.1, 0.4, 0.0, 0.2]
    index = FragRelIndex.from_fragments(STORY, scorer=_fixed_scorer(s), relation=ContextRelation(0.5), alpha=0.5)
    s_ind, s_env, s_rel = index.scores("key")
    expected, env = relation_aware_scores(np.array(s), context_weights(index.layout, 0.5), 0.5, return_environment=True)
    np.testing.assert_allclose(s_ind, s)
    np.testing.assert_allclose(s_env, env)
    np.testing.assert_allclose(s_rel, expected)
    hits = index.retrieve("key", k=2)
    assert [h.fragment.position for h in hits] == list(np.argsort(-expected)[:2])
    assert hits[0].score == pytest.approx(hits[0].independent_score + 0.5 * hits[0].environment_score)


def test_w_rel_zero_and_alpha_zero_reproduce_base_ranking(bow_embedder):
    base = FragRelIndex.from_fragments(STORY, embedder=bow_embedder, alpha=0.0)
    plain = [h.fragment.position for h in base.retrieve("the key and the door", k=5)]
    for index in (
        FragRelIndex.from_fragments(STORY, embedder=bow_embedder, relation=ContextRelation(0.0)),
        FragRelIndex.from_fragments(STORY, embedder=bow_embedder, alpha=0.0, relation=ContextRelation(0.9)),
    ):
        hits = index.retrieve("the key and the door", k=5)
        assert [h.fragment.position for h in hits] == plain
        assert all(h.score == h.independent_score for h in hits)


def test_context_lifts_neighbour_of_strong_hit():
    # fragment 2 and 3 tie on their own; 2 sits next to the strong fragment 1
    index = FragRelIndex.from_fragments(["a", "b", "c", "d", "e"], scorer=_fixed_scorer([0, 1.0, 0.3, 0.3, 0]))
    assert [h.fragment.text for h in index.retrieve("q", k=2)] == ["b", "c"]


def test_from_texts_splits_into_word_windows():
    index = FragRelIndex.from_texts(["w " * 25, "x " * 10], fragment_words=10, scorer="bm25")
    assert [(f.doc_id, f.position, f.n_words) for f in index.fragments] == [
        ("0", 0, 10),
        ("0", 1, 10),
        ("0", 2, 5),
        ("1", 0, 10),
    ]


def test_budget_fills_words_and_position_order():
    index = FragRelIndex.from_fragments(
        ["one two three", "four five", "six", "seven eight nine ten"], scorer=_fixed_scorer([0.1, 0.9, 0.5, 0.8])
    )
    hits = index.retrieve("q", budget_words=6, order="position")
    assert sum(h.fragment.n_words for h in hits) <= 6
    assert [h.fragment.position for h in hits] == sorted(h.fragment.position for h in hits)
    assert {h.fragment.text for h in hits} == {"four five", "seven eight nine ten"}


def test_bm25_and_hybrid_scorers(bow_embedder):
    for scorer in ("bm25", "hybrid"):
        index = FragRelIndex.from_fragments(STORY, scorer=scorer, embedder=bow_embedder, alpha=0.0)
        assert index.retrieve("cinnamon bakery", k=1)[0].fragment.position == 4


def test_semantic_relation_on_index(bow_embedder):
    index = FragRelIndex.from_fragments(STORY, embedder=bow_embedder, relation=SemanticRelation())
    assert len(index.retrieve("key", k=3)) == 3


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"k": 0}, ValueError, "k must be"),
        ({"k": -2}, ValueError, "k must be"),
        ({"k": 1.5}, ValueError, "k must be"),
        ({"budget_words": 0}, ValueError, "budget_words"),
        ({"order": "time"}, ValueError, "order"),
    ],
)
def test_retrieve_bad_arguments(kwargs, exc, match):
    index = FragRelIndex.from_fragments(STORY, scorer="bm25")
    with pytest.raises(exc, match=match):
        index.retrieve("key", **kwargs)


def test_bad_corpus_and_settings(bow_embedder):
    with pytest.raises(ValueError, match="empty"):
        FragRelIndex.from_texts([""], scorer="bm25")
    with pytest.raises(ValueError, match="empty"):
        FragRelIndex.from_fragments([], scorer="bm25")
    with pytest.raises(TypeError, match=r"\[text\]"):
        FragRelIndex.from_texts("a single string", scorer="bm25")
    with pytest.raises(ValueError, match="alpha"):
        FragRelIndex.from_fragments(STORY, scorer="bm25", alpha=-1)
    with pytest.raises(ValueError, match="scorer"):
        FragRelIndex.from_fragments(STORY, scorer="tfidf")
    with pytest.raises(TypeError, match="Relation"):
        FragRelIndex.from_fragments(STORY, scorer="bm25", relation="context")
    with pytest.raises(ValueError, match="unique"):
        FragRelIndex([Fragment("a", "d", 0), Fragment("b", "d", 0)], scorer="bm25")
    with pytest.raises(ValueError, match="doc_ids"):
        FragRelIndex.from_fragments(STORY, doc_ids=["a"], scorer="bm25")
    with pytest.raises(TypeError, match="query"):
        FragRelIndex.from_fragments(STORY, scorer="bm25").retrieve(None)


def test_nan_scores_from_scorer_are_rejected():
    index = FragRelIndex.from_fragments(STORY, scorer=_fixed_scorer([0.1, np.nan, 0, 0, 0]))
    with pytest.raises(ValueError, match="finite"):
        index.retrieve("q")
    short = FragRelIndex.from_fragments(STORY, scorer=_fixed_scorer([0.1, 0.2]))
    with pytest.raises(ValueError, match="2 scores for 5"):
        short.retrieve("q")


class _WrongShapeEmbedder:
    def embed_documents(self, texts):
        return np.ones((len(texts) + 1, 4))

    def embed_query(self, text):
        return np.ones(4)


class _WrongQueryDimEmbedder:
    def embed_documents(self, texts):
        return np.ones((len(texts), 4))

    def embed_query(self, text):
        return np.ones(3)


def test_embedder_with_wrong_shape_is_named():
    with pytest.raises(ValueError, match=r"expected \(5, dim\)"):
        FragRelIndex.from_fragments(STORY, embedder=_WrongShapeEmbedder())
    index = FragRelIndex.from_fragments(STORY, embedder=_WrongQueryDimEmbedder())
    with pytest.raises(ValueError, match="same embedder"):
        index.retrieve("q")
    with pytest.raises(TypeError, match="embed_documents"):
        FragRelIndex.from_fragments(STORY, embedder=object())


@pytest.mark.slow
def test_real_embedder_end_to_end(real_embedder):
    index = FragRelIndex.from_fragments(STORY, embedder=real_embedder, show_progress=False)
    assert index.embeddings.shape == (5, 384)
    assert real_embedder.max_input_tokens == 256  # what the tree warns about for longer chunks
    top = index.retrieve("Which door did the key open?", k=1)[0]
    assert top.fragment.position in (1, 2)
