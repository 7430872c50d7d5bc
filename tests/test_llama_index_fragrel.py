"""LlamaIndex FragRel components: real LlamaIndex classes (VectorStoreIndex, SentenceSplitter, IngestionPipeline,
query engines with MockLLM) with a deterministic bag-of-words embedding for the logic, and the real embedded
all-MiniLM-L6-v2 in the tests marked slow."""

from __future__ import annotations

import itertools
import random
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.llms import MockLLM
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import (
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    TextNode,
)

import fragrel_integrations.llama_index as fli
from fragrel_integrations import ContextRelation, Fragment, FragmentStore, rerank
from fragrel_integrations.llama_index import (
    FragRelIndexRetriever,
    FragRelPostprocessor,
    FragRelRetriever,
    MiniLMEmbedding,
    PositionTagger,
    tag_positions,
)
from fragrel_integrations.models.convert import optional_embedder
from fragrel_integrations.models.framework_models import LlamaIndexEmbedder

pytestmark = pytest.mark.usefixtures("base_scores_only")  # formula and wiring; auto/lexical: test_auto_defaults

# Three short original stories; SentenceSplitter(chunk_size=50) cuts them into 2-3 sentence chunks.
STORIES = {
    "lighthouse": (
        "The keeper of the lighthouse kept a log of every ship that passed the northern cape. "
        "In spring a storm broke the great lamp and the keeper rowed to the village for glass. "
        "The glassmaker in the village had no lens large enough, so the keeper waited three weeks. "
        "While he waited, a grey parrot from a wrecked ship learned to repeat the names of the tides. "
        "When the new lens came, the parrot stayed in the lighthouse and called the tides each morning. "
        "Sailors said the bird on the cape warned them better than the bell. "
        "The keeper wrote the bird into his log as the second keeper of the light. "
        "Years later his daughter took the log, the lamp and the old bird to the museum in the port. "
    ),
    "school": (
        "The island school had one teacher and eleven pupils who came by boat. "
        "Every autumn the pupils planted apple trees along the harbour wall. "
        "The teacher kept bees behind the school and sold honey at the mainland market. "
        "A winter flood washed out the harbour wall and half of the apple trees. "
        "The pupils rebuilt the wall with stones from the old chapel and planted again. "
        "By summer the new trees had flowers and the bees came back to the harbour. "
        "The teacher said the honey of that year tasted of salt and apples. "
    ),
    "market": (
        "On market days the square filled with carts of fish, bread and cheese. "
        "A trader from the south sold a green parrot that could count to ten. "
        "Nobody bought the counting bird, so the trader took it home again each evening. "
        "The baker gave the trader bread in exchange for stories about the southern ports. "
        "One evening the trader left the square and never came back to the market. "
    ),
}
QUERY = "the grey parrot called the tides"


class FixedEmbedding(BaseEmbedding):
    """A LlamaIndex embedding over any core Embedder (here the deterministic bag-of-words one)."""

    _inner: Any = PrivateAttr()

    def __init__(self, inner: Any, **kwargs: Any) -> None:
        super().__init__(model_name="bag-of-words", **kwargs)
        self._inner = inner

    def _get_query_embedding(self, query: str) -> list[float]:
        return np.asarray(self._inner.embed_query(query)).tolist()

    def _get_text_embedding(self, text: str) -> list[float]:
        return np.asarray(self._inner.embed_query(text)).tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


class ListRetriever(BaseRetriever):
    """Returns a fixed list of nodes (for logic tests that need exact candidates)."""

    def __init__(self, nodes: list[NodeWithScore]) -> None:
        self.nodes = nodes
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return list(self.nodes)


def _documents() -> list[Document]:
    # the title is part of the embedded text (MetadataMode.EMBED) but not of the raw text
    return [Document(text=text, id_=doc_id, metadata={"title": doc_id}) for doc_id, text in STORIES.items()]


def _nodes() -> list:
    return SentenceSplitter(chunk_size=50, chunk_overlap=0).get_nodes_from_documents(_documents())


def expected_scores(keys: list[tuple[str, int]], s_ind: np.ndarray, w_rel: float, alpha: float) -> np.ndarray:
    """FragRel eq. 9-10 with the context relation, written out pair by pair."""
    n = len(keys)
    s_rel = np.empty(n)
    for i in range(n):
        num = den = 0.0
        for j in range(n):
            if j != i and keys[i][0] == keys[j][0]:
                w = w_rel ** abs(keys[i][1] - keys[j][1])
                num += w * s_ind[j]
                den += w
        s_rel[i] = s_ind[i] + alpha * (num / den if den > 0 else 0.0)
    return s_rel


def _key(nws: NodeWithScore) -> tuple[str, int]:
    return nws.node.metadata["fragrel_doc_id"], nws.node.metadata["fragrel_position"]


@pytest.fixture
def embed_model(bow_embedder) -> FixedEmbedding:
    return FixedEmbedding(bow_embedder)


@pytest.fixture
def store() -> FragmentStore:
    return FragmentStore()


@pytest.fixture
def index(embed_model, store) -> VectorStoreIndex:
    return VectorStoreIndex.from_documents(
        _documents(),
        transformations=[SentenceSplitter(chunk_size=50, chunk_overlap=0), PositionTagger(store=store)],
        embed_model=embed_model,
    )


# ----------------------------------------------------------------------------------------------- public names


def test_public_names():
    assert fli.__all__ == [
        "FragRelIndexRetriever",
        "FragRelLLM",
        "FragRelPostprocessor",
        "FragRelRetriever",
        "GroundedSynthesizer",
        "InnerLoopQueryEngine",
        "MiniLMEmbedding",
        "PositionTagger",
        "SCMMemory",
        "SCMMemoryBlock",
        "SurpriseExtractor",
        "SurpriseTreeRetriever",
        "TripletGraphStore",
        "TripletMemoryRetriever",
        "VectorStoreStreamIndex",
        "tag_positions",
        "use_embedded_models",
    ]
    assert issubclass(FragRelRetriever, BaseRetriever)
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.schema import TransformComponent

    assert issubclass(FragRelPostprocessor, BaseNodePostprocessor)
    assert issubclass(PositionTagger, TransformComponent)
    assert issubclass(MiniLMEmbedding, BaseEmbedding)


def test_core_and_embedder_adapter_do_not_import_llama_index():
    code = (
        "import sys, fragrel_integrations, fragrel_integrations.models.framework_models; "
        "sys.exit(any(m == 'llama_index' or m.startswith('llama_index.') for m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# ----------------------------------------------------------------------------------------------- indexing


def test_tag_positions_counts_per_document_and_hides_keys():
    nodes = _nodes()
    text_before = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    tag_positions(nodes)
    per_doc: dict[str, list[int]] = {}
    for n in nodes:
        assert n.metadata["fragrel_doc_id"] == n.ref_doc_id
        per_doc.setdefault(n.metadata["fragrel_doc_id"], []).append(n.metadata["fragrel_position"])
    assert set(per_doc) == set(STORIES)
    for positions in per_doc.values():
        assert positions == list(range(len(positions))) and len(positions) >= 2
    # tagging changes neither the embedding text nor the LLM text
    assert [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes] == text_before
    assert "position" not in nodes[0].get_content(metadata_mode=MetadataMode.LLM)


def test_tag_positions_follows_prev_next_links_when_shuffled():
    reference = tag_positions(_nodes())
    want = {n.text: n.metadata["fragrel_position"] for n in reference}
    shuffled = _nodes()
    random.Random(3).shuffle(shuffled)
    tag_positions(shuffled)
    assert {n.text: n.metadata["fragrel_position"] for n in shuffled} == want
    shuffled = _nodes()
    random.Random(3).shuffle(shuffled)
    tag_positions(shuffled, use_links=False)  # without links: the given (shuffled) order
    assert {n.text: n.metadata["fragrel_position"] for n in shuffled} != want


def test_tag_positions_needs_a_document():
    with pytest.raises(ValueError, match="default_doc_id"):
        tag_positions([TextNode(text="a")])
    nodes = tag_positions([TextNode(text="a"), TextNode(text="b", metadata={"doc_id": "x"})], default_doc_id="d")
    assert [(n.metadata["fragrel_doc_id"], n.metadata["fragrel_position"]) for n in nodes] == [("d", 0), ("x", 0)]
    with pytest.raises(ValueError, match="position_key"):
        PositionTagger(position_key="")
    with pytest.raises(TypeError, match="FragmentStore"):
        tag_positions([TextNode(text="a")], default_doc_id="d", store={})


def test_position_tagger_in_ingestion_pipeline_fills_store():
    store = FragmentStore()
    nodes = IngestionPipeline(
        transformations=[SentenceSplitter(chunk_size=50, chunk_overlap=0), PositionTagger(store=store)]
    ).run(documents=_documents())
    assert len(store) == len(nodes)
    for n in nodes:
        stored = store.get(n.metadata["fragrel_doc_id"], n.metadata["fragrel_position"])
        assert stored is not None and stored.text == n.get_content(metadata_mode=MetadataMode.NONE)
        assert stored.metadata["fragrel_node"]["text"] == n.text and stored.metadata["title"] == n.metadata["title"]
        assert stored.metadata["fragrel_node"]["id"] == n.node_id
        assert stored.metadata["fragrel_node"]["ref_doc_id"] == n.ref_doc_id


# ----------------------------------------------------------------------------------------------- retriever


def test_retriever_scores_equal_formula_and_core_rerank(index):
    base = index.as_retriever(similarity_top_k=8)
    pool = base.retrieve(QUERY)
    keys = [_key(n) for n in pool]
    s_ind = np.array([n.score for n in pool])
    retriever = FragRelRetriever(
        base,
        similarity_top_k=4,
        relation=ContextRelation(0.5),
        alpha=0.7,
        pool_size=8,
        outside="ignore",
        preset="story",
    )
    got = retriever.retrieve(QUERY)
    assert len(got) == 4
    want = expected_scores(keys, s_ind, 0.5, 0.7)
    top = np.argsort(-want, kind="stable")[:4]
    assert [_key(n) for n in got] == [keys[i] for i in top]
    np.testing.assert_allclose([n.score for n in got], want[top], rtol=1e-9)
    for n, i in zip(got, top, strict=True):
        assert n.node.node_id == pool[i].node.node_id
        assert n.node.metadata["relevance_score"] == n.score
        assert n.node.metadata["fragrel_independent_score"] == pytest.approx(s_ind[i])
        assert n.score == pytest.approx(s_ind[i] + 0.7 * n.node.metadata["fragrel_environment_score"])
    # the same numbers as the core's rerank on the same candidates
    core = rerank(
        QUERY,
        [Fragment(n.node.get_content(), *_key(n)) for n in pool],
        relation=ContextRelation(0.5),
        alpha=0.7,
        k=4,
        scores=list(s_ind),
        outside="ignore",
    )
    assert [(c.fragment.doc_id, c.fragment.position) for c in core] == [_key(n) for n in got]
    assert [c.score for c in core] == [n.score for n in got]
    # and the environment changes the ranking on this corpus (so the test above can fail)
    assert [_key(n) for n in got] != keys[:4]


@pytest.mark.parametrize("kwargs", [{"alpha": 0.0}, {"relation": ContextRelation(0.0)}])
def test_no_environment_reproduces_base_ranking(index, kwargs):
    base = index.as_retriever(similarity_top_k=8)
    pool = base.retrieve(QUERY)
    got = FragRelRetriever(base, k=5, **kwargs).retrieve(QUERY)
    assert [n.node.node_id for n in got] == [n.node.node_id for n in pool[:5]]
    assert [n.score for n in got] == pytest.approx([n.score for n in pool[:5]], abs=1e-12)
    assert all(n.node.metadata["fragrel_independent_score"] == pytest.approx(n.score) for n in got)


def test_base_nodes_are_not_mutated(index):
    base = index.as_retriever(similarity_top_k=8)
    FragRelRetriever(base, similarity_top_k=3).retrieve(QUERY)
    for node in index.docstore.docs.values():
        assert "relevance_score" not in node.metadata
        assert "relevance_score" not in node.excluded_llm_metadata_keys
    got = FragRelRetriever(base, similarity_top_k=3).retrieve(QUERY)
    assert "relevance_score" not in got[0].node.get_content(metadata_mode=MetadataMode.LLM)
    # candidates handed over as objects keep their metadata, hidden keys and scores
    pool = base.retrieve(QUERY)
    before = [(dict(n.node.metadata), list(n.node.excluded_llm_metadata_keys), n.score) for n in pool]
    FragRelRetriever(ListRetriever(pool), similarity_top_k=3).retrieve(QUERY)
    FragRelPostprocessor(top_n=3).postprocess_nodes(pool, query_str=QUERY)
    assert [(n.node.metadata, n.node.excluded_llm_metadata_keys, n.score) for n in pool] == before


async def test_async_matches_sync(index):
    retriever = FragRelRetriever(index.as_retriever(similarity_top_k=8), similarity_top_k=4)
    sync = retriever.retrieve(QUERY)
    asynchronous = await retriever.aretrieve(QUERY)
    assert [(n.node.node_id, n.score) for n in asynchronous] == [(n.node.node_id, n.score) for n in sync]


def test_empty_base_result():
    assert FragRelRetriever(ListRetriever([])).retrieve(QUERY) == []
    assert FragRelPostprocessor().postprocess_nodes([], query_str=QUERY) == []


def test_missing_position_raises_or_isolates(embed_model):
    index = VectorStoreIndex.from_documents(
        _documents(), transformations=[SentenceSplitter(chunk_size=50, chunk_overlap=0)], embed_model=embed_model
    )
    base = index.as_retriever(similarity_top_k=6)
    with pytest.raises(ValueError, match="PositionTagger"):
        FragRelRetriever(base).retrieve(QUERY)
    with pytest.raises(ValueError, match="PositionTagger"):  # LangChain's spelling is an alias
        FragRelRetriever(base, on_missing_position="error").retrieve(QUERY)
    pool = base.retrieve(QUERY)
    with pytest.raises(ValueError, match="PositionTagger"):
        FragRelPostprocessor(on_missing_position="error").postprocess_nodes(pool, query_str=QUERY)
    got = FragRelRetriever(base, on_missing_position="isolate", pool_size=6, outside="ignore").retrieve(QUERY)
    assert [n.node.node_id for n in got] == [n.node.node_id for n in pool[:5]]
    assert [n.score for n in got] == pytest.approx([n.score for n in pool[:5]])
    assert all(n.node.metadata["fragrel_environment_score"] == 0.0 for n in got)


def _linked_nodes(scores: list[float]) -> list[NodeWithScore]:
    """Five chunks of one document linked by PREVIOUS/NEXT, without position metadata."""
    nodes = [TextNode(text=f"chunk {i}", id_=f"n{i}") for i in range(5)]
    for a, b in itertools.pairwise(nodes):
        a.relationships[NodeRelationship.NEXT] = b.as_related_node_info()
        b.relationships[NodeRelationship.PREVIOUS] = a.as_related_node_info()
    return [NodeWithScore(node=n, score=s) for n, s in zip(nodes, scores, strict=True)]


def test_links_relate_candidates_chained_by_prev_next():
    pool = _linked_nodes([0.9, 0.8, 0.1, 0.7, 0.2])
    candidates = [pool[i] for i in (0, 1, 3)]  # n2 was not retrieved: n3 is not linked to n0/n1
    got = FragRelRetriever(
        ListRetriever(candidates),
        preset="story",
        similarity_top_k=3,
        relation=ContextRelation(0.5),
        on_missing_position="links",
        outside="ignore",
    ).retrieve(QUERY)
    by_id = {n.node.node_id: n for n in got}
    want = expected_scores([("a", 0), ("a", 1), ("b", 0)], np.array([0.9, 0.8, 0.7]), 0.5, 0.5)
    assert by_id["n0"].score == pytest.approx(want[0])
    assert by_id["n1"].score == pytest.approx(want[1])
    assert by_id["n3"].score == pytest.approx(0.7)  # alone in its run: no environment
    assert "position" not in by_id["n0"].node.metadata


def test_expansion_through_store(index, store, bow_embedder):
    base = index.as_retriever(similarity_top_k=1)
    [hit] = base.retrieve(QUERY)
    doc_id, position = _key(hit)
    retriever = FragRelRetriever(
        ListRetriever([hit]),
        similarity_top_k=10,
        store=store,
        embedder=bow_embedder,
        outside="ignore",
        preset="story",
    )
    got = retriever.retrieve(QUERY)
    keys = [_key(n) for n in got]
    neighbours = [(doc_id, p) for p in (position - 1, position + 1) if store.get(doc_id, p) is not None]
    assert sorted(keys) == sorted([(doc_id, position), *neighbours]) and len(keys) > 1
    # neighbours join with the pool's lowest base score (one scale, no re-embedding); ids and text from the store
    stored_ids = {n.node_id: n for n in index.docstore.docs.values()}
    s_ind = np.full(len(got), hit.score)
    np.testing.assert_allclose([n.node.metadata["fragrel_independent_score"] for n in got], s_ind, rtol=1e-5)
    np.testing.assert_allclose([n.score for n in got], expected_scores(keys, s_ind, 0.3, 0.5), rtol=1e-5)
    for n in got:
        original = stored_ids[n.node.node_id]
        assert n.node.get_content() == original.get_content()
        assert n.node.metadata["title"] == original.metadata["title"]
        assert n.node.ref_doc_id == original.ref_doc_id
        assert "position" not in n.node.get_content(metadata_mode=MetadataMode.EMBED)
    with pytest.raises(ValueError, match="store"):
        FragRelRetriever(base, expand=1)


def test_fallback_cosine_scores_the_node_content_without_its_metadata_header(index, embed_model):
    pool = index.as_retriever(similarity_top_k=8).retrieve(QUERY)
    unscored = [NodeWithScore(node=n.node, score=None) for n in pool]
    got = FragRelRetriever(ListRetriever(unscored), similarity_top_k=8, alpha=0.0, score_embedder=embed_model).retrieve(
        QUERY
    )
    # the text LangChain's page_content would hold: no "title: ..." header (the same text in both frameworks)
    texts = [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in pool]
    q = np.asarray(embed_model.get_query_embedding(QUERY))
    d = np.asarray(embed_model.get_text_embedding_batch(texts))
    cosine = d @ q / (np.linalg.norm(d, axis=1) * np.linalg.norm(q))
    expected = {n.node.node_id: c for n, c in zip(pool, cosine, strict=True)}
    np.testing.assert_allclose([n.score for n in got], [expected[n.node.node_id] for n in got], atol=1e-6)
    assert [n.score for n in got] == sorted((n.score for n in got), reverse=True)


def test_llama_index_embedding_is_adapted(bow_embedder, embed_model):
    pool = [NodeWithScore(node=n, score=None) for n in tag_positions(_nodes())]
    raw = FragRelRetriever(ListRetriever(pool), similarity_top_k=4, score_embedder=bow_embedder).retrieve(QUERY)
    adapted = FragRelRetriever(ListRetriever(pool), similarity_top_k=4, score_embedder=embed_model).retrieve(QUERY)
    assert [n.node.node_id for n in adapted] == [n.node.node_id for n in raw]
    np.testing.assert_allclose([n.score for n in adapted], [n.score for n in raw], rtol=1e-5)
    wrapped = optional_embedder(embed_model)
    assert isinstance(wrapped, LlamaIndexEmbedder)
    assert wrapped.embed_documents(["a b", "c"]).shape == (2, bow_embedder.dim)
    assert optional_embedder(bow_embedder) is bow_embedder
    with pytest.raises(TypeError, match="BaseEmbedding"):
        optional_embedder("not a model")


def test_configurable_keys_and_position_order(embed_model):
    index = VectorStoreIndex.from_documents(
        _documents(),
        transformations=[
            SentenceSplitter(chunk_size=50, chunk_overlap=0),
            PositionTagger(doc_id_key="book", position_key="chunk"),
        ],
        embed_model=embed_model,
    )
    base = index.as_retriever(similarity_top_k=8)
    with pytest.raises(ValueError, match="'fragrel_position'"):
        FragRelRetriever(base).retrieve(QUERY)
    kw = {"doc_id_key": "book", "position_key": "chunk", "similarity_top_k": 4}
    by_score = FragRelRetriever(base, **kw).retrieve(QUERY)
    by_position = FragRelRetriever(base, order="position", **kw).retrieve(QUERY)
    assert sorted(n.node.node_id for n in by_position) == sorted(n.node.node_id for n in by_score)
    docs_seen = list(dict.fromkeys(n.node.metadata["book"] for n in by_position))
    assert [(n.node.metadata["book"], n.node.metadata["chunk"]) for n in by_position] == sorted(
        ((n.node.metadata["book"], n.node.metadata["chunk"]) for n in by_position),
        key=lambda k: (docs_seen.index(k[0]), k[1]),
    )
    assert all(n.node.metadata["chunk"] == int(n.node.metadata["chunk"]) for n in by_score)


def test_position_values_from_vector_stores():
    def pool(value):
        node = TextNode(text="x", id_="x", metadata={"doc_id": "d", "position": value})
        return [NodeWithScore(node=node, score=0.5)]

    for ok in (3, 3.0, "3", np.int64(3)):
        assert FragRelRetriever(ListRetriever(pool(ok)), outside="ignore").retrieve(QUERY)[0].score == 0.5
    with pytest.raises(TypeError, match="position"):
        FragRelRetriever(ListRetriever(pool("third"))).retrieve(QUERY)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"similarity_top_k": 3, "k": 4}, ValueError),
        ({"similarity_top_k": 0}, ValueError),
        ({"alpha": -1.0}, ValueError),
        ({"order": "time"}, ValueError),
        ({"on_missing_position": "skip"}, ValueError),
        ({"relation": 0.3}, TypeError),
        ({"store": "x.sqlite"}, TypeError),
        ({"embedder": object()}, TypeError),
        ({"doc_id_key": ""}, ValueError),
    ],
)
def test_retriever_rejects_bad_settings(kwargs, error):
    with pytest.raises(error):
        FragRelRetriever(ListRetriever([]), **kwargs)


def test_retriever_rejects_non_retriever():
    with pytest.raises(TypeError, match="as_retriever"):
        FragRelRetriever(lambda q: [])


# ----------------------------------------------------------------------------------------------- postprocessor


def test_postprocessor_in_query_engine(index):
    postprocessor = FragRelPostprocessor(top_n=3, relation=ContextRelation(0.5))
    engine = index.as_query_engine(similarity_top_k=8, llm=MockLLM(), node_postprocessors=[postprocessor])
    response = engine.query(QUERY)
    base = index.as_retriever(similarity_top_k=8)
    want = FragRelRetriever(base, 3, relation=ContextRelation(0.5), pool_size=8).retrieve(QUERY)
    assert [n.node.node_id for n in response.source_nodes] == [n.node.node_id for n in want]
    assert [n.score for n in response.source_nodes] == [n.score for n in want]
    for n in response.source_nodes:
        assert {"relevance_score", "fragrel_independent_score", "fragrel_environment_score"} <= set(n.node.metadata)


async def test_postprocessor_async_and_query_required(index):
    pool = index.as_retriever(similarity_top_k=8).retrieve(QUERY)
    postprocessor = FragRelPostprocessor(top_n=4)
    sync = postprocessor.postprocess_nodes(pool, query_str=QUERY)
    asynchronous = await postprocessor.apostprocess_nodes(pool, query_str=QUERY)
    assert len(sync) == 4
    assert [(n.node.node_id, n.score) for n in asynchronous] == [(n.node.node_id, n.score) for n in sync]
    with pytest.raises(ValueError, match="query"):
        postprocessor.postprocess_nodes(pool)
    with pytest.raises(ValueError):
        FragRelPostprocessor(order="time")
    with pytest.raises(ValueError, match="store"):
        FragRelPostprocessor(expand=2)


# ----------------------------------------------------------------------------------------------- index retriever


def test_index_retriever_matches_core_index(bow_embedder):
    from fragrel_integrations import FragRelIndex

    texts = list(STORIES.values())
    retriever = FragRelIndexRetriever.from_texts(
        texts, fragment_words=20, embedder=bow_embedder, similarity_top_k=4, show_progress=False
    )
    core = FragRelIndex.from_texts(texts, fragment_words=20, embedder=bow_embedder, show_progress=False)
    want = core.retrieve(QUERY, k=4)
    got = retriever.retrieve(QUERY)
    assert [(n.node.metadata["fragrel_doc_id"], n.node.metadata["fragrel_position"]) for n in got] == [
        (h.fragment.doc_id, h.fragment.position) for h in want
    ]
    assert [n.score for n in got] == [h.score for h in want]
    assert [n.node.get_content() for n in got] == [h.fragment.text for h in want]
    docs = FragRelIndexRetriever.from_documents(
        _documents(), fragment_words=20, embedder=FixedEmbedding(bow_embedder), budget_words=45, show_progress=False
    )
    hits = docs.retrieve(QUERY)
    assert sum(len(n.node.get_content().split()) for n in hits) <= 45
    assert {n.node.metadata["fragrel_doc_id"] for n in hits} <= set(STORIES)


def test_index_retriever_from_texts_routes_keywords(bow_embedder):
    """Constructor arguments go to the retriever, the rest to the core index (a LlamaIndex embedding converted);
    a misspelt keyword is a TypeError before anything is indexed."""
    retriever = FragRelIndexRetriever.from_texts(
        list(STORIES.values()),
        fragment_words=20,
        embedder=FixedEmbedding(bow_embedder),
        alpha=0.7,
        top_m=2,
        similarity_top_k=3,
        order="position",
        show_progress=False,
    )
    assert (retriever.similarity_top_k, retriever.order) == (3, "position")
    assert (retriever.index.alpha, retriever.index.top_m) == (0.7, 2)
    assert len(retriever.retrieve(QUERY)) == 3
    with pytest.raises(TypeError, match="alfa"):
        FragRelIndexRetriever.from_texts(["a b c"], scorer="bm25", alfa=0.7)


# ----------------------------------------------------------------------------------------------- real MiniLM


@pytest.fixture(scope="module")
def minilm(real_embedder) -> MiniLMEmbedding:
    return MiniLMEmbedding()


@pytest.fixture(scope="module")
def real_setup(minilm):
    store = FragmentStore()
    index = VectorStoreIndex.from_documents(
        _documents(),
        transformations=[SentenceSplitter(chunk_size=50, chunk_overlap=0), PositionTagger(store=store)],
        embed_model=minilm,
    )
    return index, store


@pytest.mark.slow
async def test_minilm_embedding_is_the_embedded_model(minilm, real_embedder):
    assert minilm.model is real_embedder
    texts = ["a grey parrot", "the harbour wall"]
    got = np.asarray(minilm.get_text_embedding_batch(texts))
    np.testing.assert_allclose(got, real_embedder.embed_documents(texts), atol=1e-6)
    assert got.shape == (2, 384)
    query = np.asarray(await minilm.aget_query_embedding("a grey parrot"))
    np.testing.assert_allclose(query, got[0], atol=1e-5)


@pytest.mark.slow
def test_real_index_base_scores_are_minilm_cosine(real_setup, real_embedder):
    index, _ = real_setup
    pool = index.as_retriever(similarity_top_k=8).retrieve(QUERY)
    texts = [n.node.get_content(metadata_mode=MetadataMode.EMBED) for n in pool]
    cos = real_embedder.embed_documents(texts) @ real_embedder.embed_query(QUERY)
    np.testing.assert_allclose([n.score for n in pool], cos, atol=1e-5)
    got = FragRelRetriever(
        index.as_retriever(similarity_top_k=8),
        similarity_top_k=4,
        pool_size=8,
        outside="ignore",
        preset="story",
    ).retrieve(QUERY)
    want = expected_scores([_key(n) for n in pool], np.array([n.score for n in pool]), 0.3, 0.5)
    np.testing.assert_allclose([n.score for n in got], np.sort(want)[::-1][:4], rtol=1e-9)
    assert got[0].node.metadata["fragrel_doc_id"] == "lighthouse"


@pytest.mark.slow
def test_real_query_engine_with_postprocessor_and_store(real_setup, minilm):
    index, store = real_setup
    postprocessor = FragRelPostprocessor(preset="story", top_n=3, store=store, embedder=minilm)
    engine = index.as_query_engine(similarity_top_k=4, llm=MockLLM(), node_postprocessors=[postprocessor])
    response = engine.query(QUERY)
    assert len(response.source_nodes) == 3
    pool = index.as_retriever(similarity_top_k=4).retrieve(QUERY)
    # with a store every pool member (hits and neighbours) is re-scored by the same model: scores match the base
    base_scores = {n.node.node_id: n.score for n in pool}
    for n in response.source_nodes:
        if n.node.node_id in base_scores:
            assert n.node.metadata["fragrel_independent_score"] == pytest.approx(base_scores[n.node.node_id], abs=1e-5)
        assert n.score == pytest.approx(
            n.node.metadata["fragrel_independent_score"] + 0.5 * n.node.metadata["fragrel_environment_score"]
        )
    assert isinstance(str(response), str)
