"""LangChain FragRel components: standard suites (real MiniLM + InMemoryVectorStore) and behaviour tests."""

from __future__ import annotations

import functools
import hashlib
import re
from typing import Any

import numpy as np
import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("langchain_tests")

from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda, RunnableParallel, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_tests.integration_tests import (
    EmbeddingsIntegrationTests,
    RetrieversIntegrationTests,
)
from pydantic import Field

import fragrel_integrations.langchain as fl
from fragrel_integrations import ContextRelation, Fragment, FragmentStore, FragRelIndex, rerank
from fragrel_integrations.langchain import (
    FragRelIndexRetriever,
    FragRelRetriever,
    MiniLMEmbeddings,
    add_positions,
)

pytestmark = pytest.mark.usefixtures("base_scores_only")  # formula and wiring; auto/lexical: test_auto_defaults

# An original short story, one chunk per sentence, in reading order.
STORY = [
    "Mara kept the lighthouse on Gull Rock for eleven winters.",
    "Every evening she climbed the spiral stair with a can of oil.",
    "The lamp room smelled of salt, brass polish and old rope.",
    "One night a storm tore the shutters from the keeper's cottage.",
    "In the morning she found a small iron key washed up among the kelp.",
    "She hid it beneath the loose third stone of the stair.",
    "Weeks later a fisherman named Tobin asked about a lost sea chest.",
    "He said the chest held letters from his brother in the north.",
    "Mara fetched the key and walked with him to the wreck at low tide.",
    "The chest opened, and the letters inside were dry.",
    "Tobin read them on the rocks while the gulls circled overhead.",
    "After that he brought her fresh bread every Sunday.",
]
ISLAND = [
    "The ferry to the island runs twice a week in summer.",
    "Goats graze on the northern cliffs above the harbour.",
    "The island school has nine pupils and one teacher.",
]


def chunks() -> list[Document]:
    """Splitter-like output: two sources, in order, without positions."""
    story = [Document(page_content=t, metadata={"source": "story.txt"}) for t in STORY]
    island = [Document(page_content=t, metadata={"source": "island.txt"}) for t in ISLAND]
    return story + island


class BagOfWords(Embeddings):
    """Cheap deterministic hashed bag-of-words embedder (for logic tests only; real-model tests follow)."""

    dim = 64

    def __init__(self) -> None:
        self.calls = 0

    def _vec(self, text: str) -> list[float]:
        v = np.zeros(self.dim)
        for w in re.findall(r"[a-z]+", text.lower()):
            v[int(hashlib.md5(w.encode()).hexdigest(), 16) % self.dim] += 1.0
        n = np.linalg.norm(v)
        return (v / n if n else v + 1.0 / np.sqrt(self.dim)).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vec(text)


class NoEmbedder(Embeddings):
    """Fails if FragRel embeds anything."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise AssertionError("the embedder must not be called")

    def embed_query(self, text: str) -> list[float]:
        raise AssertionError("the embedder must not be called")


class ListRetriever(BaseRetriever):
    """A real BaseRetriever returning a fixed list (first ``k``); records how it was called."""

    documents: list[Document]
    calls: list[dict[str, Any]] = Field(default_factory=list)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        self.calls.append({"mode": "sync", **kwargs})
        return self.documents[: kwargs.get("k", len(self.documents))]

    async def _aget_relevant_documents(self, query: str, *, run_manager: Any, **kwargs: Any) -> list[Document]:
        self.calls.append({"mode": "async", **kwargs})
        return self.documents[: kwargs.get("k", len(self.documents))]


def scored_docs() -> list[Document]:
    """Positioned story chunks with a base score in metadata, best first."""
    docs = add_positions(chunks())
    base = [0.9, 0.2, 0.8, 0.1, 0.5, 0.7, 0.3]
    picked = [docs[i] for i in (5, 0, 4, 13, 6, 8, 2)]
    return [d.model_copy(update={"metadata": {**d.metadata, "score": s}}) for d, s in zip(picked, base, strict=True)]


class Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.starts: list[tuple[Any, Any]] = []

    def on_retriever_start(self, serialized, query, *, run_id, parent_run_id=None, **kwargs) -> None:
        self.starts.append((run_id, parent_run_id))


def key(doc: Document) -> tuple[str, int]:
    return doc.metadata["fragrel_doc_id"], doc.metadata["fragrel_position"]


# ----------------------------------------------------------------------------------------------- real model


@functools.cache
def _minilm() -> MiniLMEmbeddings:
    return MiniLMEmbeddings()


@functools.cache
def _vectorstore() -> tuple[InMemoryVectorStore, FragmentStore]:
    store = FragmentStore()
    vs = InMemoryVectorStore(_minilm())
    vs.add_documents(add_positions(chunks(), store=store))
    return vs, store


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbeddings:
    return _minilm()


@pytest.fixture(scope="module")
def vectorstore(minilm) -> tuple[InMemoryVectorStore, FragmentStore]:
    return _vectorstore()


@pytest.mark.slow
class TestFragRelRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[FragRelRetriever]:
        return FragRelRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        vs, store = _vectorstore()
        return {"base_retriever": vs.as_retriever(), "pool_size": 6, "embedder": _minilm(), "store": store, "expand": 1}

    @property
    def retriever_query_example(self) -> str:
        return "Where did Mara hide the key?"


@pytest.mark.slow
class TestFragRelIndexRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[FragRelIndexRetriever]:
        return FragRelIndexRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        return {"index": _index()}

    @property
    def retriever_query_example(self) -> str:
        return "Where did Mara hide the key?"


@functools.cache
def _index() -> FragRelIndex:
    return FragRelIndex.from_fragments(STORY, embedder=_minilm(), show_progress=False)


@pytest.mark.slow
class TestMiniLMEmbeddingsStandard(EmbeddingsIntegrationTests):
    @property
    def embeddings_class(self) -> type[MiniLMEmbeddings]:
        return MiniLMEmbeddings


@pytest.mark.slow
def test_minilm_embeddings_match_core_model(minilm):
    from fragrel_integrations.models.local import default_embedder

    vec = np.asarray(minilm.embed_documents(["a red apple", "a green pear"]))
    assert vec.shape == (2, 384)
    np.testing.assert_allclose(vec, default_embedder().embed_documents(["a red apple", "a green pear"]), atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(vec, axis=1), 1.0, atol=1e-5)
    assert minilm.embed_query("a red apple") == pytest.approx(vec[0].tolist(), abs=1e-6)
    assert minilm.embed_documents([]) == []


@pytest.mark.slow
def test_real_scores_equal_core_rerank(vectorstore, minilm):
    vs, _ = vectorstore
    query = "Where did Mara hide the key?"
    retriever = FragRelRetriever(preset="story", base_retriever=vs.as_retriever(), pool_size=8, k=5, embedder=minilm)
    got = retriever.invoke(query)
    pool = vs.similarity_search(query, k=8)
    expected = rerank(
        query,
        [Fragment(d.page_content, d.metadata["fragrel_doc_id"], d.metadata["fragrel_position"]) for d in pool],
        relation=ContextRelation(0.3),
        alpha=0.5,
        k=5,
        score_embedder=minilm,
    )
    assert [d.page_content for d in got] == [h.text for h in expected]
    for doc, hit in zip(got, expected, strict=True):
        assert doc.metadata["relevance_score"] == pytest.approx(hit.score, abs=1e-6)
        assert doc.metadata["fragrel_independent_score"] == pytest.approx(hit.independent_score, abs=1e-6)
        assert doc.metadata["fragrel_environment_score"] == pytest.approx(hit.environment_score, abs=1e-6)
    # the independent score is the vector store's own cosine similarity
    cos = dict((d.page_content, s) for d, s in vs.similarity_search_with_score(query, k=8))
    for doc in got:
        assert doc.metadata["fragrel_independent_score"] == pytest.approx(cos[doc.page_content], abs=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("setting", [{"alpha": 0.0}, {"relation": ContextRelation(0.0)}])
def test_real_plain_settings_reproduce_vectorstore_ranking(vectorstore, minilm, setting):
    vs, _ = vectorstore
    query = "the fisherman and his brother's letters"
    plain = [d.page_content for d in vs.similarity_search(query, k=8)]
    fragrel = FragRelRetriever(base_retriever=vs.as_retriever(), pool_size=8, k=8, embedder=minilm, **setting)
    got = fragrel.invoke(query)
    assert [d.page_content for d in got] == plain
    assert all(d.metadata["relevance_score"] == d.metadata["fragrel_independent_score"] for d in got)
    # and the default relation does use the environment on the same pool
    default = FragRelRetriever(base_retriever=vs.as_retriever(), pool_size=8, k=8, embedder=minilm).invoke(query)
    assert any(d.metadata["fragrel_environment_score"] > 0 for d in default)


@pytest.mark.slow
def test_real_neighbour_expansion_brings_missed_neighbours(vectorstore, minilm):
    vs, store = vectorstore
    query = "Where did Mara hide the key?"
    base = vs.as_retriever(search_kwargs={"k": 1})
    [hit] = base.invoke(query)
    d, p = key(hit)
    # a base with no pool knob returns its one hit; the store brings the neighbours
    retriever = FragRelRetriever(base_retriever=lambda q: [hit], k=10, embedder=minilm, store=store, expand=1)
    got = retriever.invoke(query)
    keys = {key(doc) for doc in got}
    wanted = {(d, q) for q in (p - 1, p, p + 1) if store.get(d, q) is not None}
    assert keys == wanted and len(wanted) > 1
    for doc in got:
        assert doc.page_content == store.get(*key(doc)).text
        assert doc.metadata["source"] == "story.txt"


@pytest.mark.slow
async def test_real_async_equals_sync(vectorstore, minilm):
    vs, _ = vectorstore
    retriever = FragRelRetriever(base_retriever=vs.as_retriever(), pool_size=8, k=4, embedder=minilm)
    sync = retriever.invoke("lost sea chest")
    got = await retriever.ainvoke("lost sea chest")
    assert [(d.page_content, d.metadata) for d in got] == [(d.page_content, d.metadata) for d in sync]


@pytest.mark.slow
def test_real_default_embedder_is_minilm(vectorstore, minilm):
    vs, _ = vectorstore
    query = "a storm at night"
    with_default = FragRelRetriever(base_retriever=vs.as_retriever(), pool_size=8, k=4).invoke(query)
    explicit = FragRelRetriever(base_retriever=vs.as_retriever(), pool_size=8, k=4, embedder=minilm).invoke(query)
    assert [d.page_content for d in with_default] == [d.page_content for d in explicit]
    for a, b in zip(with_default, explicit, strict=True):
        assert a.metadata["relevance_score"] == pytest.approx(b.metadata["relevance_score"], abs=1e-5)


@pytest.mark.slow
def test_real_index_retriever_from_texts_matches_index(minilm):
    text = " ".join(STORY)
    retriever = FragRelIndexRetriever.from_texts(
        [text], fragment_words=12, embedder=minilm, show_progress=False, k=3, order="position"
    )
    hits = retriever.index.retrieve("Where did Mara hide the key?", k=3, order="position")
    got = retriever.invoke("Where did Mara hide the key?")
    assert [d.page_content for d in got] == [h.text for h in hits]
    assert [d.metadata["fragrel_position"] for d in got] == sorted(d.metadata["fragrel_position"] for d in got)
    assert [d.metadata["relevance_score"] for d in got] == [h.score for h in hits]


# ----------------------------------------------------------------------------------------------- logic


def test_public_names_are_pinned():
    assert fl.__all__ == [
        "FragRelChatModel",
        "FragRelCompressor",
        "FragRelIndexRetriever",
        "FragRelRetriever",
        "InnerLoopRunnable",
        "LangGraphStoreStream",
        "MiniLMEmbeddings",
        "SCMMiddleware",
        "SurpriseTreeRetriever",
        "TripletKVStore",
        "TripletMemoryStore",
        "VectorStoreStreamIndex",
        "add_positions",
        "grounded_answer_runnable",
        "make_memory_tools",
        "with_store_scores",
    ]


def test_add_positions_numbers_per_source_and_copies():
    docs = chunks()
    before = [dict(d.metadata) for d in docs]
    out = add_positions(docs)
    assert [d.metadata for d in docs] == before  # inputs untouched
    assert [key(d) for d in out] == [("story.txt", i) for i in range(12)] + [("island.txt", i) for i in range(3)]
    assert all(d.metadata["source"] for d in out)
    no_source = add_positions(
        [Document("a"), Document("b", metadata={"doc_id": "x"}), Document("c")], default_doc_id="d"
    )
    assert [key(d) for d in no_source] == [("d", 0), ("x", 0), ("d", 1)]
    custom = add_positions(
        [Document("a", metadata={"file": 3})], doc_id_key="doc", position_key="pos", source_key="file"
    )
    assert custom[0].metadata == {"file": 3, "doc": "3", "pos": 0}


def test_add_positions_writes_store_and_validates():
    store = FragmentStore()
    out = add_positions(chunks(), store=store)
    assert len(store) == 15
    stored = store.get("story.txt", 5)
    assert stored.text == STORY[5] and stored.metadata == out[5].metadata
    with pytest.raises(TypeError, match="list of Documents"):
        add_positions(Document("a"))
    with pytest.raises(TypeError, match=r"documents\[1\]"):
        add_positions([Document("a"), "b"])
    with pytest.raises(ValueError, match="must differ"):
        add_positions(chunks(), doc_id_key="k", position_key="k")
    with pytest.raises(TypeError, match="JSON"):
        add_positions([Document("a", metadata={"obj": object()})], store=FragmentStore())


def test_add_positions_composes_with_inmemory_vectorstore():
    vs = InMemoryVectorStore(BagOfWords())
    ids = vs.add_documents(add_positions(chunks()))
    assert len(ids) == 15
    [hit] = vs.similarity_search("iron key washed up among the kelp", k=1)
    assert hit.page_content == STORY[4] and key(hit) == ("story.txt", 4)
    retriever = FragRelRetriever(base_retriever=vs.as_retriever(), pool_size=6, k=3, embedder=BagOfWords())
    got = retriever.invoke("iron key washed up among the kelp")
    assert len(got) == 3 and all(isinstance(d.metadata["fragrel_position"], int) for d in got)
    # the vector store's own documents are not mutated
    assert "relevance_score" not in vs.get_by_ids([got[0].id])[0].metadata


def test_scores_equal_core_rerank_with_base_scores():
    docs = scored_docs()
    retriever = FragRelRetriever(
        base_retriever=RunnableLambda(lambda q: docs), k=5, embedder=NoEmbedder(), outside="ignore", preset="story"
    )
    got = retriever.invoke("q")
    expected = rerank(
        "q",
        [Fragment(d.page_content, *key(d)) for d in docs],
        relation=ContextRelation(0.3),
        alpha=0.5,
        k=5,
        scores=[d.metadata["score"] for d in docs],
        outside="ignore",
    )
    assert [d.page_content for d in got] == [h.text for h in expected]
    for doc, hit in zip(got, expected, strict=True):
        assert doc.metadata["relevance_score"] == hit.score
        assert doc.metadata["fragrel_independent_score"] == hit.independent_score == doc.metadata["score"]
        assert doc.metadata["fragrel_environment_score"] == hit.environment_score
    # hand check of eq. 9-10 for position 5 (score 0.9): neighbours 4 (0.8), 6 (0.5), 8 (0.7), 0 (0.2), 2 (0.3)
    w = {4: 0.3, 6: 0.3, 8: 0.3**3, 0: 0.3**5, 2: 0.3**3}
    s = {4: 0.8, 6: 0.5, 8: 0.7, 0: 0.2, 2: 0.3}
    env = sum(w[j] * s[j] for j in w) / sum(w.values())
    top = next(d for d in got if key(d) == ("story.txt", 5))
    assert top.metadata["fragrel_environment_score"] == pytest.approx(env)
    assert top.metadata["relevance_score"] == pytest.approx(0.9 + 0.5 * env)


def test_score_key_and_default_score_keys():
    docs = [d.model_copy(update={"metadata": {**d.metadata, "rel": d.metadata.pop("score")}}) for d in scored_docs()]
    base = RunnableLambda(lambda q: docs)
    got = FragRelRetriever(base_retriever=base, score_key="rel", embedder=NoEmbedder(), k=7).invoke("q")
    assert {d.metadata["fragrel_independent_score"] for d in got} == {d.metadata["rel"] for d in docs}
    relevance = [d.model_copy(update={"metadata": {**d.metadata, "relevance_score": 1.0}}) for d in docs]
    got = FragRelRetriever(base_retriever=RunnableLambda(lambda q: relevance), embedder=NoEmbedder()).invoke("q")
    assert all(d.metadata["fragrel_independent_score"] == 1.0 for d in got)
    bad = [docs[0].model_copy(update={"metadata": {**docs[0].metadata, "rel": "high"}})]
    with pytest.raises(TypeError, match="'rel'"):
        FragRelRetriever(base_retriever=RunnableLambda(lambda q: bad), score_key="rel").invoke("q")


def test_alpha_zero_reproduces_base_ranking_with_base_scores():
    docs = scored_docs()
    base_order = [d.page_content for d in sorted(docs, key=lambda d: -d.metadata["score"])]
    for setting in ({"alpha": 0.0}, {"relation": ContextRelation(0.0)}):
        got = FragRelRetriever(base_retriever=RunnableLambda(lambda q: docs), k=7, **setting).invoke("q")
        assert [d.page_content for d in got] == base_order
    changed = FragRelRetriever(base_retriever=RunnableLambda(lambda q: docs), k=7, alpha=2.0).invoke("q")
    assert [d.page_content for d in changed] != base_order


def test_missing_scores_use_the_score_embedder_for_all():
    docs = scored_docs()
    docs[3] = docs[3].model_copy(update={"metadata": {k: v for k, v in docs[3].metadata.items() if k != "score"}})
    emb = BagOfWords()
    got = FragRelRetriever(base_retriever=RunnableLambda(lambda q: docs), k=7, score_embedder=emb).invoke("key stair")
    assert emb.calls == 1
    cos = {d.page_content: float(np.dot(emb._vec(d.page_content), emb._vec("key stair"))) for d in docs}
    for d in got:
        assert d.metadata["fragrel_independent_score"] == pytest.approx(cos[d.page_content], abs=1e-6)


def test_k_field_and_invoke_kwarg():
    docs = scored_docs()
    retriever = FragRelRetriever(base_retriever=RunnableLambda(lambda q: docs), k=3)
    assert len(retriever.invoke("q")) == 3
    assert len(retriever.invoke("q", k=1)) == 1
    assert len(retriever.invoke("q", k=50)) == len(docs)
    assert [d.page_content for d in retriever.invoke("q", k=2)] == [d.page_content for d in retriever.invoke("q")][:2]
    with pytest.raises(ValueError, match="k must be a positive int"):
        retriever.invoke("q", k=0)
    with pytest.raises(ValueError):
        FragRelRetriever(base_retriever=RunnableLambda(lambda q: docs), k=0)


def test_pool_size_and_kwargs_reach_a_base_retriever():
    base = ListRetriever(documents=scored_docs())
    retriever = FragRelRetriever(base_retriever=base, pool_size=4, k=2)
    got = retriever.invoke("q", filter="x")
    assert base.calls == [{"mode": "sync", "k": 4, "filter": "x"}]
    assert len(got) == 2 and {key(d) for d in got} <= {key(d) for d in base.documents[:4]}
    # wrapped in a binding (e.g. .with_config) it still counts as a retriever
    FragRelRetriever(base_retriever=base.with_config(tags=["t"]), pool_size=6).invoke("q")
    assert base.calls[-1]["k"] == 6
    with pytest.raises(ValueError, match="pool_size"):
        FragRelRetriever(base_retriever=RunnableLambda(lambda q: []), pool_size=4)
    with pytest.raises(TypeError, match="forwarded"):
        FragRelRetriever(base_retriever=RunnableLambda(lambda q: [])).invoke("q", filter="x")


async def test_async_path_uses_base_ainvoke():
    base = ListRetriever(documents=scored_docs())
    retriever = FragRelRetriever(base_retriever=base, pool_size=5, k=3)
    got = await retriever.ainvoke("q", k=2)
    assert base.calls == [{"mode": "async", "k": 5}]
    sync = retriever.invoke("q", k=2)
    assert [(d.page_content, d.metadata) for d in got] == [(d.page_content, d.metadata) for d in sync]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_callbacks_reach_the_base_retriever(mode):
    base = ListRetriever(documents=scored_docs())
    retriever = FragRelRetriever(base_retriever=base, k=2)
    rec = Recorder()
    config = {"callbacks": [rec]}
    if mode == "sync":
        retriever.invoke("q", config=config)
    else:
        await retriever.ainvoke("q", config=config)
    assert len(rec.starts) == 2
    (outer, outer_parent), (inner, inner_parent) = rec.starts
    assert outer_parent is None and inner_parent == outer and inner != outer


def test_missing_position_error_and_isolate_mode():
    docs = scored_docs()
    loose = [
        Document("A loose note about the key.", metadata={"score": 0.95}),
        Document("Another note.", metadata={"score": 0.4}),
    ]
    mixed = [loose[0], *docs, loose[1]]
    with pytest.raises(ValueError, match=r"add_positions.*on_missing_position='isolate'"):
        FragRelRetriever(base_retriever=RunnableLambda(lambda q: mixed)).invoke("q")
    with pytest.raises(ValueError, match=r"add_positions"):  # LlamaIndex's spelling is an alias
        FragRelRetriever(base_retriever=RunnableLambda(lambda q: mixed), on_missing_position="raise").invoke("q")
    with pytest.raises(ValueError):
        FragRelRetriever(base_retriever=RunnableLambda(lambda q: mixed), on_missing_position="skip")
    isolated = FragRelRetriever(
        base_retriever=RunnableLambda(lambda q: mixed),
        k=len(mixed),
        on_missing_position="isolate",
        outside="ignore",
        preset="story",
    )
    got = isolated.invoke("q")
    assert len(got) == len(mixed)
    for d in got:
        if "fragrel_doc_id" not in d.metadata:  # an isolated document: base score, empty environment, metadata as given
            assert d.metadata["fragrel_environment_score"] == 0.0
            assert d.metadata["relevance_score"] == d.metadata["score"]
            assert set(d.metadata) == {
                "score",
                "relevance_score",
                "fragrel_independent_score",
                "fragrel_environment_score",
            }
    note = next(d for d in got if d.page_content == loose[0].page_content)
    assert note.metadata["relevance_score"] == note.metadata["fragrel_independent_score"] == 0.95
    # positioned documents still get their environment from each other (not from the isolated ones)
    positioned = {key(d): d for d in got if "fragrel_doc_id" in d.metadata}
    expected = rerank(
        "q",
        [Fragment(d.page_content, *key(d)) for d in docs],
        relation=ContextRelation(0.3),
        alpha=0.5,
        scores=[d.metadata["score"] for d in docs],
        outside="ignore",
    )
    for hit in expected:
        got_score = positioned[(hit.fragment.doc_id, hit.fragment.position)].metadata["relevance_score"]
        assert got_score == pytest.approx(hit.score, rel=1e-12)


def test_bad_positions_raise_type_error():
    doc = Document("x", metadata={"doc_id": "a", "position": "third", "score": 1.0})
    with pytest.raises(TypeError, match="'position'"):
        FragRelRetriever(preset="story", base_retriever=RunnableLambda(lambda q: [doc])).invoke("q")
    ok = [
        Document("x", metadata={"doc_id": "a", "position": 2.0, "score": 1.0}),
        Document("y", metadata={"doc_id": "a", "position": "3", "score": 0.5}),
    ]
    got = FragRelRetriever(preset="story", base_retriever=RunnableLambda(lambda q: ok), outside="ignore").invoke("q")
    assert got[1].metadata["fragrel_environment_score"] == pytest.approx(1.0)


def test_neighbour_expansion_via_store():
    store = FragmentStore()
    docs = add_positions(chunks(), store=store)
    base = RunnableLambda(lambda q: [docs[5], docs[13]])  # the base retriever missed 4 and 6
    retriever = FragRelRetriever(base_retriever=base, k=10, embedder=BagOfWords(), store=store, expand=1)
    got = retriever.invoke("key stair")
    assert {key(d) for d in got} == {
        ("story.txt", 4),
        ("story.txt", 5),
        ("story.txt", 6),
        ("island.txt", 0),
        ("island.txt", 1),
        ("island.txt", 2),
    }
    neighbour = next(d for d in got if key(d) == ("story.txt", 4))
    assert neighbour.page_content == STORY[4] and neighbour.metadata["source"] == "story.txt"
    assert neighbour.metadata["fragrel_environment_score"] > 0
    with pytest.raises(ValueError, match="expand > 0 needs a store"):
        FragRelRetriever(base_retriever=base, expand=1)


def test_empty_base_result_and_bad_base_result():
    retriever = FragRelRetriever(base_retriever=RunnableLambda(lambda q: []), embedder=NoEmbedder())
    assert retriever.invoke("q") == []
    with pytest.raises(TypeError, match="list of langchain_core Document"):
        FragRelRetriever(base_retriever=RunnableLambda(lambda q: "text")).invoke("q")
    with pytest.raises(TypeError, match=r"result\[0\]"):
        FragRelRetriever(base_retriever=RunnableLambda(lambda q: ["text"])).invoke("q")


def test_duplicates_are_removed_and_originals_untouched():
    docs = scored_docs()
    snapshot = [(d.id, d.page_content, dict(d.metadata)) for d in docs]
    twice = [*docs, *docs]
    got = FragRelRetriever(base_retriever=RunnableLambda(lambda q: twice), k=20).invoke("q")
    assert len(got) == len(docs) and len({key(d) for d in got}) == len(docs)
    assert [(d.id, d.page_content, d.metadata) for d in docs] == snapshot
    assert all(g is not d for g in got for d in docs)


def test_document_ids_and_metadata_round_trip():
    docs = [
        d.model_copy(update={"id": f"id-{i}", "metadata": {**d.metadata, "extra": [i]}})
        for i, d in enumerate(scored_docs())
    ]
    got = FragRelRetriever(base_retriever=RunnableLambda(lambda q: docs), k=7).invoke("q")
    by_id = {d.id: d for d in docs}
    for d in got:
        assert d.metadata == {
            **by_id[d.id].metadata,
            **{k: d.metadata[k] for k in ("relevance_score", "fragrel_independent_score", "fragrel_environment_score")},
        }


def test_order_position():
    docs = scored_docs()
    got = FragRelRetriever(base_retriever=RunnableLambda(lambda q: docs), k=4, order="position").invoke("q")
    by_score = FragRelRetriever(base_retriever=RunnableLambda(lambda q: docs), k=4).invoke("q")
    assert {key(d) for d in got} == {key(d) for d in by_score}
    assert [key(d) for d in got] == sorted(key(d) for d in got)
    with pytest.raises(ValueError):
        FragRelRetriever(base_retriever=RunnableLambda(lambda q: docs), order="time")


def test_plain_function_base_is_wrapped():
    docs = scored_docs()
    retriever = FragRelRetriever(base_retriever=lambda q: docs, k=2)
    assert isinstance(retriever.base_retriever, RunnableLambda)
    assert [d.page_content for d in retriever.invoke("q")] == [
        d.page_content for d in FragRelRetriever(base_retriever=RunnableLambda(lambda q: docs), k=2).invoke("q")
    ]


def test_validation_messages():
    base = RunnableLambda(lambda q: [])
    with pytest.raises(ValueError):
        FragRelRetriever(base_retriever="not a retriever")
    with pytest.raises(ValueError):
        FragRelRetriever(base_retriever=base, alpha=-1)
    with pytest.raises(ValueError):
        FragRelRetriever(base_retriever=base, alpha=float("inf"))
    with pytest.raises(TypeError, match="embed_documents"):
        FragRelRetriever(base_retriever=base, embedder="minilm")
    with pytest.raises(TypeError, match="relation must be a Relation"):
        FragRelRetriever(base_retriever=base, relation=0.3)
    with pytest.raises(ValueError, match="extra"):
        FragRelRetriever(base_retriever=base, top_k=3)
    with pytest.raises(ValueError, match="must differ"):
        FragRelRetriever(base_retriever=base, doc_id_key="p", position_key="p")


def test_lcel_chain():
    docs = scored_docs()
    retriever = FragRelRetriever(base_retriever=RunnableLambda(lambda q: docs), k=3, order="position")

    def format_docs(found: list[Document]) -> str:
        return "\n\n".join(d.page_content for d in found)

    chain = retriever | format_docs
    text = chain.invoke("q")
    assert text == "\n\n".join(d.page_content for d in retriever.invoke("q"))
    rag_inputs = RunnableParallel(context=retriever | format_docs, question=RunnablePassthrough())
    assert rag_inputs.invoke("where?") == {"context": text, "question": "where?"}
    assert chain.batch(["a", "b"]) == [text, text]


async def test_lcel_chain_async():
    docs = scored_docs()
    chain = FragRelRetriever(base_retriever=RunnableLambda(lambda q: docs), k=2) | (
        lambda ds: [d.page_content for d in ds]
    )
    assert await chain.ainvoke("q") == chain.invoke("q")


def test_index_retriever_from_documents_round_trips():
    docs = [d.model_copy(update={"id": f"id-{i}"}) for i, d in enumerate(chunks())]
    retriever = FragRelIndexRetriever.from_documents(docs, scorer="bm25", k=3)
    got = retriever.invoke("iron key kelp")
    assert got[0].id == "id-4" and got[0].page_content == STORY[4]
    assert got[0].metadata["source"] == "story.txt" and key(got[0]) == ("story.txt", 4)
    assert "relevance_score" not in docs[4].metadata
    _, s_env, s_rel = retriever.index.scores("iron key kelp")
    i = next(j for j, f in enumerate(retriever.index.fragments) if (f.doc_id, f.position) == ("story.txt", 4))
    assert got[0].metadata["relevance_score"] == pytest.approx(s_rel[i])
    assert got[0].metadata["fragrel_environment_score"] == pytest.approx(s_env[i])
    assert len(retriever.invoke("iron key kelp", k=1)) == 1
    with pytest.raises(ValueError, match="all documents positions"):
        FragRelIndexRetriever.from_documents([add_positions(docs)[0], docs[1]], scorer="bm25")


def test_index_retriever_builders_route_keywords_to_retriever_or_index():
    """Retriever fields go to the retriever, the rest to the core index with the core's defaults; a misspelt
    keyword is a TypeError before anything is indexed."""
    retriever = FragRelIndexRetriever.from_texts(
        [" ".join(STORY)], fragment_words=12, scorer="bm25", alpha=0.7, top_m=2, k=2, order="position"
    )
    assert (retriever.k, retriever.order) == (2, "position")
    assert (retriever.index.alpha, retriever.index.top_m, retriever.index.scorer_name) == (0.7, 2, "bm25")
    default = FragRelIndexRetriever.from_texts([" ".join(STORY)], fragment_words=12, scorer="bm25")
    assert default.index.alpha == FragRelIndex.from_texts(["x"], scorer="bm25").alpha
    built = FragRelIndexRetriever.from_documents(chunks(), scorer="bm25", alpha=0.9, k=1)
    assert (built.k, built.index.alpha) == (1, 0.9)
    with pytest.raises(TypeError, match="alfa"):
        FragRelIndexRetriever.from_texts(["a b c"], scorer="bm25", alfa=0.7)


def test_index_retriever_wraps_a_core_index():
    index = FragRelIndex.from_fragments(STORY, scorer="bm25", relation=ContextRelation(0.5), alpha=1.0)
    retriever = FragRelIndexRetriever(index=index, k=2)
    got = retriever.invoke("letters")
    hits = index.retrieve("letters", k=2)
    assert [d.page_content for d in got] == [h.text for h in hits]
    assert [(d.metadata["fragrel_doc_id"], d.metadata["fragrel_position"]) for d in got] == [
        (h.fragment.doc_id, h.fragment.position) for h in hits
    ]
    assert FragRelIndexRetriever(index=index, budget_words=12, k=10).invoke("letters")
    assert (
        sum(
            len(d.page_content.split())
            for d in FragRelIndexRetriever(index=index, budget_words=12, k=10).invoke("letters")
        )
        <= 12
    )


async def test_compressor_equals_the_retriever_over_the_same_candidates_sync_and_async():
    docs = scored_docs()
    want = FragRelRetriever(base_retriever=RunnableLambda(lambda q: docs), k=3).invoke("the key")
    compressor = fl.FragRelCompressor(k=3)
    got = compressor.compress_documents(docs, "the key")
    agot = await compressor.acompress_documents(docs, "the key")
    for out in (got, agot):
        assert [(d.page_content, d.metadata) for d in out] == [(d.page_content, d.metadata) for d in want]
    assert [d.metadata for d in docs] == [d.metadata for d in scored_docs()]  # inputs untouched
    assert compressor.compress_documents([], "the key") == []


def test_compressor_warns_on_a_short_pool_and_names_the_fix():
    docs = scored_docs()
    with pytest.warns(UserWarning, match=r"can only re-order them.*search_kwargs=\{\"k\": 50\}"):
        fl.FragRelCompressor(k=len(docs)).compress_documents(docs, "the key")
    with pytest.raises(ValueError, match="add_positions"):
        fl.FragRelCompressor().compress_documents([Document("a loose note")], "the key")
    with pytest.raises(TypeError, match="query must be str"):
        fl.FragRelCompressor().compress_documents(docs, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="vector-store retriever"):
        fl.with_store_scores(RunnableLambda(lambda q: docs))  # type: ignore[arg-type]
