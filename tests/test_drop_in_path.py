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
from fragrel_integrations.adapters.pools import minmax_scores
from fragrel_integrations.core.presets import DEFAULT_PRESET, PRESETS, preset
from fragrel_integrations.langchain import FragRelRetriever, add_positions
from fragrel_integrations.langchain._pool import oriented, sized_base
from fragrel_integrations.llama_index import FragRelPostprocessor, tag_positions
from fragrel_integrations.llama_index import FragRelRetriever as LlamaFragRelRetriever
from fragrel_integrations.llama_index._pool import sized_base as llama_sized_base

pytestmark = pytest.mark.usefixtures("base_scores_only")  # formula and wiring; auto/lexical: test_auto_defaults

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


def test_bm25_retriever_is_sized_and_scored_by_its_own_bm25():
    base = BM25Retriever.from_documents(_docs())  # k = 4, ignores invoke kwargs, returns no scores
    retriever = FragRelRetriever(base_retriever=base, k=5)
    got = retriever.invoke("boats item14")
    assert len(got) == 5 and base.k == 4
    bm25 = dict(zip(TEXTS, base.vectorizer.get_scores(base.preprocess_func("boats item14")), strict=True))
    for d in got:
        assert d.metadata["fragrel_independent_score"] == pytest.approx(bm25[d.page_content])
        assert "fragrel_base_score" not in d.metadata


def test_scored_bm25_copy_keeps_the_retrievers_ranking():
    base = BM25Retriever.from_documents(_docs(), k=50)
    scored = sized_base(base, 50)
    query = "goats item3 boats"
    assert [d.page_content for d in scored.invoke(query)] == [d.page_content for d in base.invoke(query)]


def test_ensemble_members_are_sized_and_their_scores_fused():
    vs = InMemoryVectorStore(DeterministicFakeEmbedding(size=32))
    vs.add_documents(_docs())
    bm25 = BM25Retriever.from_documents(_docs())
    ensemble = EnsembleRetriever(retrievers=[bm25, vs.as_retriever()], weights=[0.25, 0.75])
    assert len(ensemble.invoke("boats")) <= 8
    got = FragRelRetriever(base_retriever=ensemble, k=5, alpha=0.0).invoke("boats item14")
    assert len(got) == 5 and bm25.k == 4
    # s_ind = 0.25 * min-max(BM25 over its 50) + 0.75 * min-max(store score over its 50), 0 where absent
    b = dict(zip(TEXTS, bm25.vectorizer.get_scores(bm25.preprocess_func("boats item14")), strict=True))
    top_b = sorted(b.values(), reverse=True)[:50]
    v = {d.page_content: s for d, s in vs.similarity_search_with_score("boats item14", k=50)}

    def mm(x, vals):
        return (x - min(vals)) / (max(vals) - min(vals))

    for d in got:
        t = d.page_content
        want = (0.25 * mm(b[t], top_b) if b[t] >= top_b[-1] else 0.0) + (0.75 * mm(v[t], v.values()) if t in v else 0.0)
        assert d.metadata["fragrel_independent_score"] == pytest.approx(want)


def test_minmax_member_scores_without_scores_use_ranks():
    assert minmax_scores([None, None, None, None]).tolist() == [1.0, 0.75, 0.5, 0.25]


def test_general_preset_lets_only_the_top_m_lend_support():
    assert DEFAULT_PRESET == "auto" and preset("general").top_m == 10
    r = FragRelRetriever(base_retriever=lambda q: [], preset="general")
    assert (r.alpha, r.top_m) == (preset("general").alpha, 10)
    assert FragRelRetriever(base_retriever=lambda q: [], preset="story").top_m == 0  # 0: every candidate
    # doc b's first turn is ranked 12th: under top_m=10 it lends its neighbour nothing, under top_m=0 it does
    pool = [Document(f"a{i}", metadata={"doc_id": "a", "position": i, "score": 1.0 - i / 100}) for i in range(11)]
    pool += [Document(f"b{i}", metadata={"doc_id": "b", "position": i, "score": 0.5 - i / 10}) for i in range(2)]
    for top_m, lends in ((10, False), (0, True)):
        got = FragRelRetriever(base_retriever=lambda q: pool, k=13, top_m=top_m).invoke("q")
        env = {d.page_content: d.metadata["fragrel_environment_score"] for d in got}
        assert (env["b1"] > 0) is lends


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
    assert FragRelRetriever(base_retriever=lambda q: [], preset="general").alpha == PRESETS["general"].alpha
    assert FragRelRetriever(base_retriever=lambda q: []).alpha is None  # auto: chosen per pool
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


def test_llama_index_rrf_fusion_is_asked_for_its_relative_score_fusion():
    from llama_index.core.llms import MockLLM
    from llama_index.core.retrievers import QueryFusionRetriever

    nodes = _nodes()
    index = VectorStoreIndex(nodes, embed_model=MockEmbedding(embed_dim=8))
    bm25 = LlamaBM25Retriever.from_defaults(nodes=nodes, similarity_top_k=2)
    fusion = QueryFusionRetriever(
        [index.as_retriever(), bm25], num_queries=1, mode="reciprocal_rerank", use_async=False, llm=MockLLM()
    )
    sized = llama_sized_base(fusion, 50)
    assert getattr(sized.mode, "value", sized.mode) == "relative_score"
    assert getattr(fusion.mode, "value", fusion.mode) == "reciprocal_rerank"
    assert sized.similarity_top_k == 50 and bm25.similarity_top_k == 2
    got = LlamaFragRelRetriever(fusion).retrieve("boats item14")
    assert len(got) == 5 and all(0.0 <= n.metadata["fragrel_independent_score"] <= 1.0 for n in got)


def test_postprocessor_warns_once_when_it_gets_no_more_than_it_keeps():
    pool = [NodeWithScore(node=n, score=1.0 - i / 10) for i, n in enumerate(_nodes()[:2])]
    post = FragRelPostprocessor(top_n=5)
    with pytest.warns(UserWarning, match="similarity_top_k=50"):
        post.postprocess_nodes(pool, query_str="boats")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        post.postprocess_nodes(pool, query_str="boats")
