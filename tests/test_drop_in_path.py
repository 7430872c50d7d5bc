"""The drop-in path: FragRel wrappers with default arguments around the retrievers users have (real classes)."""

import warnings

import pytest
from langchain_classic.retrievers import EnsembleRetriever
from langchain_community.retrievers import BM25Retriever
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core import VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.schema import NodeWithScore, TextNode
from llama_index.retrievers.bm25 import BM25Retriever as LlamaBM25Retriever

import fragrel_integrations.models.local as local
from fragrel_integrations.core.presets import PRESETS, preset
from fragrel_integrations.langchain import FragRelRetriever, add_positions
from fragrel_integrations.langchain._pool import oriented
from fragrel_integrations.llama_index import FragRelPostprocessor, tag_positions
from fragrel_integrations.llama_index import FragRelRetriever as LlamaFragRelRetriever

TEXTS = [f"turn {i} about {'boats' if i % 7 == 0 else 'goats'} and item{i}" for i in range(80)]


@pytest.fixture(autouse=True)
def no_model(monkeypatch):
    """No wrapper may load the embedded model behind the user's back."""
    monkeypatch.setattr(local, "default_embedder", lambda: pytest.fail("the embedded model was loaded"))
    monkeypatch.setattr(local, "default_cached_embedder", lambda: pytest.fail("the embedded model was loaded"))


def _docs():
    return add_positions([Document(t, metadata={"source": "chat"}) for t in TEXTS])


def test_vector_store_retriever_pool_is_sized_and_scored_by_the_store():
    vs = InMemoryVectorStore(DeterministicFakeEmbedding(size=32))
    vs.add_documents(_docs())
    base = vs.as_retriever()  # k = 4 by default
    got = FragRelRetriever(base_retriever=base, k=5).invoke("turn 14 about boats")
    assert len(got) == 5 and base.search_kwargs == {}  # the user's retriever is unchanged
    cosine = {d.page_content: s for d, s in vs.similarity_search_with_score("turn 14 about boats", k=80)}
    for d in got:
        assert d.metadata["fragrel_independent_score"] == pytest.approx(cosine[d.page_content])
        assert "fragrel_base_score" not in d.metadata
    # the pool held max(10 k, 50) = 50 candidates: FragRel may return documents the base ranks below 5
    top50 = [d.page_content for d, _ in vs.similarity_search_with_score("turn 14 about boats", k=50)]
    assert {d.page_content for d in got} <= set(top50)


async def test_vector_store_retriever_async_matches_sync():
    vs = InMemoryVectorStore(DeterministicFakeEmbedding(size=32))
    vs.add_documents(_docs())
    retriever = FragRelRetriever(base_retriever=vs.as_retriever(), k=5)
    sync = retriever.invoke("boats")
    got = await retriever.ainvoke("boats")
    assert [(d.page_content, d.metadata) for d in got] == [(d.page_content, d.metadata) for d in sync]


def test_bm25_retriever_without_scores_is_sized_and_ranked():
    base = BM25Retriever.from_documents(_docs())  # k = 4, ignores invoke kwargs, returns no scores
    retriever = FragRelRetriever(base_retriever=base, k=5)
    got = retriever.invoke("boats item14")
    assert len(got) == 5 and base.k == 4
    ranks = [round(20 * (1 - d.metadata["fragrel_independent_score"]), 9) for d in got]  # 1 - rank / 20
    assert all(r == int(r) and 0 <= r < 20 for r in ranks)


def test_ensemble_members_are_sized():
    vs = InMemoryVectorStore(DeterministicFakeEmbedding(size=32))
    vs.add_documents(_docs())
    bm25 = BM25Retriever.from_documents(_docs())
    ensemble = EnsembleRetriever(retrievers=[bm25, vs.as_retriever()], weights=[0.5, 0.5])
    assert len(ensemble.invoke("boats")) <= 8
    got = FragRelRetriever(base_retriever=ensemble, k=5).invoke("boats")
    assert len(got) == 5 and bm25.k == 4


def test_base_without_a_pool_knob_warns_once():
    docs = _docs()[:3]
    retriever = FragRelRetriever(base_retriever=lambda q: docs, k=5)
    with pytest.warns(UserWarning, match="can only re-order"):
        retriever.invoke("q")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        retriever.invoke("q")


def test_presets_set_relation_alpha_order_and_explicit_values_win():
    r = FragRelRetriever(base_retriever=lambda q: [], preset="dialogue")
    assert (r.relation, r.alpha, r.order) == (preset("dialogue").relation(), 1.0, "position")
    r = FragRelRetriever(base_retriever=lambda q: [], preset="dialogue", alpha=0.2, order="score")
    assert (r.alpha, r.order) == (0.2, "score")
    assert FragRelRetriever(base_retriever=lambda q: []).alpha == PRESETS["story"].alpha
    with pytest.raises(ValueError, match="preset must be one of"):
        FragRelRetriever(base_retriever=lambda q: [], preset="poetry")
    with pytest.raises(ValueError, match="preset must be one of"):
        FragRelPostprocessor(preset="poetry")


def test_oriented_turns_distances_into_scores():
    docs = [Document("a"), Document("b")]
    assert [s for _, s in oriented(list(zip(docs, [0.9, 0.2], strict=True)))] == [0.9, 0.2]
    assert [s for _, s in oriented(list(zip(docs, [0.2, 0.9], strict=True)))] == [-0.2, -0.9]


def _nodes():
    return tag_positions([TextNode(text=t, id_=f"n{i}") for i, t in enumerate(TEXTS)], default_doc_id="chat")


def test_llama_index_vector_retriever_default_top_k_is_sized():
    index = VectorStoreIndex(_nodes(), embed_model=MockEmbedding(embed_dim=8))
    base = index.as_retriever()  # similarity_top_k = 2 by default
    got = LlamaFragRelRetriever(base).retrieve("boats")
    assert len(got) == 5 and base.similarity_top_k == 2


def test_llama_index_bm25_retriever_is_sized_within_its_corpus():
    nodes = _nodes()[:30]
    base = LlamaBM25Retriever.from_defaults(nodes=nodes, similarity_top_k=2)
    got = LlamaFragRelRetriever(base, similarity_top_k=5).retrieve("boats item14")
    assert len(got) == 5 and base.similarity_top_k == 2


def test_postprocessor_warns_once_when_it_gets_no_more_than_it_keeps():
    pool = [NodeWithScore(node=n, score=1.0 - i / 10) for i, n in enumerate(_nodes()[:2])]
    post = FragRelPostprocessor(top_n=5)
    with pytest.warns(UserWarning, match="similarity_top_k=50"):
        post.postprocess_nodes(pool, query_str="boats")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        post.postprocess_nodes(pool, query_str="boats")
