"""The FragRel wrappers over real embedded vector stores, in both frameworks, with real MiniLM embeddings.

Each store holds a synthetic two-speaker chat (one document / node per turn, tagged with ``add_positions`` /
``tag_positions``): every fact is told over two adjacent turns, only the first names what a later question asks
about, and other turns share the question's words without answering it, so the second evidence turn is found
through its neighbour. Per store: the wrapper with default arguments beside
its base (recall@5), the base's scores oriented as similarities (Spearman against the true cosine), and no warning
that only the wrapper's own request causes. Stores that are not installed are skipped (the ``test`` extra
installs them). The texts are embedded once (MiniLM) and the stores read those vectors through small embedding
classes, so every store sees exactly the same vectors.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.embeddings import BaseEmbedding
from llama_index.core.schema import TextNode
from scipy.stats import spearmanr

from fragrel_integrations.adapters import pools as pool
from fragrel_integrations.langchain import FragRelCompressor, add_positions, with_store_scores
from fragrel_integrations.langchain import FragRelRetriever as LCFragRel
from fragrel_integrations.llama_index import FragRelPostprocessor, tag_positions
from fragrel_integrations.llama_index import FragRelRetriever as LIFragRel
from fragrel_integrations.llama_index._pool import score_kind

K = 5
DIM = 384

#: (what the first turn says, the detail the next turn adds, a later question about it, turns elsewhere in the chat
#: that share the question's words but do not answer it)
FACTS = [
    (
        "I adopted a dog from the shelter last week.",
        "He answers to Biscuit, and he is a beagle.",
        "What is my dog called?",
        [
            "The dog park near my office was closed today.",
            "My colleague wants a dog too.",
            "A dog barked all night next door.",
        ],
    ),
    (
        "My sister is getting married in the spring.",
        "It will be in Lisbon, by the river.",
        "Where is my sister's wedding?",
        [
            "A friend of mine got married last year.",
            "Wedding dresses are so expensive now.",
            "My sister lent me her bike.",
        ],
    ),
    (
        "I started learning the cello this year.",
        "Mrs Okafor gives me lessons on Thursdays.",
        "Who teaches me the cello?",
        [
            "The cello section at the concert was wonderful.",
            "Learning an instrument as an adult is hard.",
            "My cousin plays the violin.",
        ],
    ),
    (
        "We finally bought a car for the family.",
        "A green hatchback, second hand, from 2019.",
        "What colour is our car?",
        [
            "Car insurance is a nightmare here.",
            "Our neighbours have two cars.",
            "The car park at the station is always full.",
        ],
    ),
    (
        "I have a job interview at a bank next month.",
        "It is for a risk analyst post in Porto.",
        "Which position did I apply for at the bank?",
        ["My bank changed its opening hours.", "Interviews make me nervous.", "A friend works at a bank in Madrid."],
    ),
    (
        "My grandmother sent me her soup recipe.",
        "Leeks, white beans and a little smoked paprika.",
        "What goes into my grandmother's soup?",
        ["I had a tomato soup for lunch.", "My grandmother loves crosswords.", "Recipes online are often too long."],
    ),
    (
        "I am training for a half marathon.",
        "The race is in October, I run three times a week.",
        "When is my half marathon?",
        ["A marathon runner spoke at our school.", "Training plans confuse me.", "My knee hurts after running."],
    ),
    (
        "Our flat has a leak in the bathroom ceiling.",
        "Rui is coming on Monday to fix it.",
        "Who will repair the leak in the flat?",
        [
            "The bathroom mirror is cracked as well.",
            "Our old flat was much colder.",
            "Leaks in old buildings are common.",
        ],
    ),
    (
        "I joined a book club at the library.",
        "This month it is a novel by Chimamanda Adichie.",
        "What is my book club reading?",
        ["The library is closed on Sundays.", "I read a book about whales on holiday.", "Club meetings can run late."],
    ),
    (
        "My son broke his wrist playing football.",
        "Six weeks in a blue cast, the doctor said.",
        "How long will my son wear his cast?",
        [
            "Football practice was cancelled because of rain.",
            "My son wants a new bicycle.",
            "A wrist brace helps when typing.",
        ],
    ),
]
FILLER = [
    "Thanks, that sounds sensible.",
    "Let me think about it for a while.",
    "Okay, what else should I keep in mind?",
    "That is good to know.",
    "Sure, I can try that tomorrow.",
    "Honestly I had not thought of that.",
]


def _chat(offset: int) -> tuple[list[str], list[tuple[str, list[int]]]]:
    """One conversation of two speakers: each fact as two adjacent turns and a filler, then the distractors
    (each followed by a filler); questions with their two evidence turns."""
    facts = FACTS[offset:] + FACTS[:offset]
    turns, questions = [], []
    for i, (a, b, q, _) in enumerate(facts):
        start = len(turns)
        turns += [a, b, FILLER[i % 6]]
        questions.append((q, [start, start + 1]))
    # distractors spread over the chat, each between fillers
    for i, (_, _, _, ds) in enumerate(facts):
        for j, d in enumerate(ds):
            turns += [d, FILLER[(i + j + 2) % 6]]
    return [f"{'Maya' if i % 2 == 0 else 'Sam'}: {t}" for i, t in enumerate(turns)], questions


TURNS, QUESTIONS = _chat(0)
OTHER_TURNS, _ = _chat(5)  # a second conversation in the same store (filter tests)


@pytest.fixture(scope="module")
def vectors() -> dict[str, np.ndarray]:
    """MiniLM vectors of every turn and question, computed once."""
    from fragrel_integrations.models.local import MiniLMEmbedder

    texts = sorted(set(TURNS) | set(OTHER_TURNS) | {q for q, _ in QUESTIONS})
    embedded = np.asarray(MiniLMEmbedder().embed_documents(texts), dtype=np.float32)
    return dict(zip(texts, embedded, strict=True))


class CachedLCEmbeddings(Embeddings):
    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self.vectors = vectors

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        if text not in self.vectors:  # a store's probe for the dimension (langchain-qdrant embeds "dummy_text")
            return [0.0] * (DIM - 1) + [1.0]
        return self.vectors[text].tolist()


def _li_embedding(vectors: dict[str, np.ndarray]) -> BaseEmbedding:
    class CachedLIEmbedding(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return vectors[query].tolist()

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_query_embedding(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return vectors[text].tolist()

    return CachedLIEmbedding(model_name="minilm-cached")


def _recall(found: list[str], gold: list[int]) -> float:
    return len({TURNS.index(t) for t in found if t in TURNS} & set(gold)) / len(gold)


def _cosine(vectors: dict[str, np.ndarray], query: str, texts: list[str]) -> np.ndarray:
    q = vectors[query]
    d = np.stack([vectors[t] for t in texts])
    return d @ q / (np.linalg.norm(d, axis=1) * np.linalg.norm(q))


def _no_wrapper_warning(record: list[warnings.WarningMessage]) -> None:
    assert not [str(w.message) for w in record if "Relevance scores" in str(w.message)]


# ------------------------------------------------------------------------------------------------ LangChain


def _lc_docs(turns: list[str], source: str) -> list[Document]:
    return add_positions([Document(t, metadata={"source": source}) for t in turns])


def _lc_faiss(vectors, docs):
    pytest.importorskip("faiss")
    from langchain_community.vectorstores import FAISS

    return FAISS.from_documents(docs, CachedLCEmbeddings(vectors))


def _lc_chroma(vectors, docs):
    pytest.importorskip("chromadb")
    langchain_chroma = pytest.importorskip("langchain_chroma")
    import chromadb

    client = chromadb.EphemeralClient()
    name = f"fragrel-{len(docs)}-{id(docs)}"
    return langchain_chroma.Chroma.from_documents(
        docs, CachedLCEmbeddings(vectors), client=client, collection_name=name
    )  # Chroma's default space: squared L2


def _lc_qdrant(vectors, docs):
    langchain_qdrant = pytest.importorskip("langchain_qdrant")

    return langchain_qdrant.QdrantVectorStore.from_documents(
        docs, CachedLCEmbeddings(vectors), location=":memory:", collection_name="fragrel"
    )


def _lc_inmemory(vectors, docs):
    from langchain_core.vectorstores import InMemoryVectorStore

    return InMemoryVectorStore.from_documents(docs, CachedLCEmbeddings(vectors))


LC_STORES = {"faiss": _lc_faiss, "chroma": _lc_chroma, "qdrant": _lc_qdrant, "inmemory": _lc_inmemory}


@pytest.mark.parametrize("store", sorted(LC_STORES))
def test_langchain_wrapper_gains_over_its_base_on_every_store_without_warnings(store, vectors):
    vs = LC_STORES[store](vectors, _lc_docs(TURNS, "chat"))
    base = vs.as_retriever(search_kwargs={"k": K})
    wrapper = LCFragRel(base_retriever=base, k=K)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        got = [[d.page_content for d in wrapper.invoke(q)] for q, _ in QUESTIONS]
    _no_wrapper_warning(record)
    base_r = np.mean([_recall([d.page_content for d in base.invoke(q)], g) for q, g in QUESTIONS])
    wrap_r = np.mean([_recall(found, g) for found, (_, g) in zip(got, QUESTIONS, strict=True)])
    assert wrap_r > base_r, (store, base_r, wrap_r)


@pytest.mark.parametrize("store", ["faiss", "chroma"])
def test_langchain_l2_stores_warn_when_asked_directly_but_not_through_the_wrapper(store, vectors):
    """The warning the wrapper silences is real: the store gives it for the same request asked directly."""
    vs = LC_STORES[store](vectors, _lc_docs(TURNS, "chat"))
    query = QUESTIONS[0][0]
    with pytest.warns(UserWarning, match="Relevance scores must be between 0 and 1"):
        vs.similarity_search_with_relevance_scores(query, k=len(TURNS))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        LCFragRel(base_retriever=vs.as_retriever(), k=K, pool_size=len(TURNS)).invoke(query)
    _no_wrapper_warning(record)


def test_langchain_faiss_with_a_filter_gets_a_full_pool(vectors):
    docs = _lc_docs(TURNS, "chat") + _lc_docs(OTHER_TURNS, "other") + _lc_docs(OTHER_TURNS, "third")
    vs = _lc_faiss(vectors, docs)
    base = vs.as_retriever(search_kwargs={"k": K, "filter": {"source": "chat"}})
    wrapper = LCFragRel(base_retriever=base, k=K, pool_size=40)
    sized = wrapper._base("q", K, {})[1]
    assert sized.search_kwargs["fetch_k"] >= 4 * 40  # raised with k: FAISS filters the fetch_k it searched
    for query, _ in QUESTIONS[:3]:
        pool_docs = sized.invoke(query)
        assert len(pool_docs) == 40 and {d.metadata["source"] for d in pool_docs} == {"chat"}
    # a user's own small fetch_k: asked again with a larger one until the filter lets the pool through
    tight = vs.as_retriever(search_kwargs={"k": K, "filter": {"source": "chat"}, "fetch_k": 5})
    assert len(LCFragRel(base_retriever=tight, k=K)._base("q", K, {})[1].invoke(QUESTIONS[0][0])) == 50
    got = [[d.page_content for d in wrapper.invoke(q)] for q, _ in QUESTIONS]
    base_r = np.mean([_recall([d.page_content for d in base.invoke(q)], g) for q, g in QUESTIONS])
    assert np.mean([_recall(f, g) for f, (_, g) in zip(got, QUESTIONS, strict=True)]) > base_r


async def test_langchain_async_matches_sync_on_a_filtered_faiss(vectors):
    docs = _lc_docs(TURNS, "chat") + _lc_docs(OTHER_TURNS, "other")
    vs = _lc_faiss(vectors, docs)
    base = vs.as_retriever(search_kwargs={"filter": {"source": "chat"}, "fetch_k": 5})
    wrapper = LCFragRel(base_retriever=base, k=K)
    query = QUESTIONS[1][0]
    sync = wrapper.invoke(query)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        got = await wrapper.ainvoke(query)
    _no_wrapper_warning(record)
    assert [(d.page_content, d.metadata["relevance_score"]) for d in got] == [
        (d.page_content, d.metadata["relevance_score"]) for d in sync
    ]


def test_compressor_in_contextual_compression_equals_the_retriever(vectors):
    retrievers = pytest.importorskip("langchain_classic.retrievers")
    from langchain_classic.retrievers.document_compressors import DocumentCompressorPipeline

    vs = _lc_faiss(vectors, _lc_docs(TURNS, "chat"))
    base = vs.as_retriever(search_kwargs={"k": 50})
    # a base whose Documents carry the store's scores: the compressor reads them as the retriever does
    scored = with_store_scores(base)
    compression = retrievers.ContextualCompressionRetriever(
        base_compressor=FragRelCompressor(k=K), base_retriever=scored
    )
    pipeline = retrievers.ContextualCompressionRetriever(
        base_compressor=DocumentCompressorPipeline(transformers=[FragRelCompressor(k=K)]), base_retriever=scored
    )
    wrapper = LCFragRel(base_retriever=base, k=K)
    for query, _ in QUESTIONS:
        want = [(d.page_content, d.metadata) for d in wrapper.invoke(query)]
        assert [(d.page_content, d.metadata) for d in compression.invoke(query)] == want
        assert [(d.page_content, d.metadata) for d in pipeline.invoke(query)] == want


# ------------------------------------------------------------------------------------------------ LlamaIndex


def _li_index(vectors, store=None):
    """A VectorStoreIndex over one node per turn of the chat, tagged as a user tags them."""
    nodes = tag_positions([TextNode(text=t) for t in TURNS], default_doc_id="chat")
    storage = None if store is None else StorageContext.from_defaults(vector_store=store)
    return VectorStoreIndex(nodes, storage_context=storage, embed_model=_li_embedding(vectors))


def _li_faiss(metric: str):
    def build(vectors):
        faiss = pytest.importorskip("faiss")
        pytest.importorskip("llama_index.vector_stores.faiss")
        from llama_index.vector_stores.faiss import FaissVectorStore

        index = faiss.IndexFlatL2(DIM) if metric == "l2" else faiss.IndexFlatIP(DIM)
        return _li_index(vectors, FaissVectorStore(faiss_index=index))

    return build


def _li_chroma(vectors):
    pytest.importorskip("llama_index.vector_stores.chroma")
    import chromadb
    from llama_index.vector_stores.chroma import ChromaVectorStore

    collection = chromadb.EphemeralClient().get_or_create_collection(f"fragrel-li-{id(vectors)}")
    return _li_index(vectors, ChromaVectorStore(chroma_collection=collection))


def _li_qdrant(distance: str):
    def build(vectors):
        pytest.importorskip("llama_index.vector_stores.qdrant")
        from llama_index.vector_stores.qdrant import QdrantVectorStore
        from qdrant_client import QdrantClient, models

        client = QdrantClient(location=":memory:")
        client.create_collection(
            "fragrel",
            vectors_config=models.VectorParams(size=DIM, distance=getattr(models.Distance, distance)),
        )
        return _li_index(vectors, QdrantVectorStore(client=client, collection_name="fragrel"))

    return build


def _li_milvus(metric: str):
    def build(vectors, tmp):
        pytest.importorskip("llama_index.vector_stores.milvus")
        pytest.importorskip("milvus_lite")
        from llama_index.vector_stores.milvus import MilvusVectorStore

        uri = str(tmp / f"milvus-{metric}.db")
        return _li_index(vectors, MilvusVectorStore(uri=uri, dim=DIM, similarity_metric=metric, overwrite=True))

    return build


def _li_lancedb(vectors, tmp):
    pytest.importorskip("llama_index.vector_stores.lancedb")
    from llama_index.vector_stores.lancedb import LanceDBVectorStore

    return _li_index(vectors, LanceDBVectorStore(uri=str(tmp / "lancedb")))


def _li_simple(vectors):
    return _li_index(vectors)


LI_STORES = {
    "faiss-l2": (_li_faiss("l2"), "squared_l2"),
    "faiss-ip": (_li_faiss("ip"), "similarity"),
    "chroma": (_li_chroma, "similarity"),
    "qdrant-cosine": (_li_qdrant("COSINE"), "similarity"),
    "qdrant-euclid": (_li_qdrant("EUCLID"), "l2"),
    "simple": (_li_simple, "similarity"),
    "milvus-l2": (_li_milvus("L2"), "squared_l2"),
    "milvus-ip": (_li_milvus("IP"), "similarity"),
    "lancedb": (_li_lancedb, "similarity"),
}
#: The stores that keep files (built in a temporary folder).
_ON_DISK = ("milvus-l2", "milvus-ip", "lancedb")


@pytest.fixture(scope="module")
def li_indexes(vectors, tmp_path_factory):
    built = {}

    def get(name):
        if name not in built:
            build = LI_STORES[name][0]
            built[name] = build(vectors, tmp_path_factory.mktemp(name)) if name in _ON_DISK else build(vectors)
        return built[name]

    return get


@pytest.mark.parametrize("store", sorted(LI_STORES))
def test_llama_index_scores_are_oriented_as_similarities(store, li_indexes, vectors):
    base = li_indexes(store).as_retriever(similarity_top_k=len(TURNS))
    assert score_kind(base) == LI_STORES[store][1]  # read from the store's own metric
    for query, _ in QUESTIONS[:4]:
        nodes = base.retrieve(query)
        texts = [n.node.get_content() for n in nodes]
        oriented = pool.oriented_scores([n.score for n in nodes], score_kind(base))
        rho = spearmanr(oriented, _cosine(vectors, query, texts)).statistic
        assert rho > 0.9, (store, rho)
        # and the wrapper's independent scores (no pool BM25, no environment) follow the true cosine too
        hits = LIFragRel(base, similarity_top_k=len(TURNS), lexical=0.0, alpha=0.0).retrieve(query)
        ind = [n.node.metadata["fragrel_independent_score"] for n in hits]
        cos = _cosine(vectors, query, [n.node.get_content() for n in hits])
        assert spearmanr(ind, cos).statistic > 0.9


@pytest.mark.parametrize("store", sorted(LI_STORES))
def test_llama_index_wrapper_and_postprocessor_gain_over_their_base(store, li_indexes):
    index = li_indexes(store)
    base = index.as_retriever(similarity_top_k=K)
    wrapper = LIFragRel(base, similarity_top_k=K)
    pool_base = index.as_retriever(similarity_top_k=50)
    post = FragRelPostprocessor(top_n=K)
    base_r, wrap_r, post_r = [], [], []
    for query, gold in QUESTIONS:
        base_r.append(_recall([n.node.get_content() for n in base.retrieve(query)], gold))
        wrap_r.append(_recall([n.node.get_content() for n in wrapper.retrieve(query)], gold))
        nodes = post.postprocess_nodes(pool_base.retrieve(query), query_str=query)
        post_r.append(_recall([n.node.get_content() for n in nodes], gold))
    assert np.mean(wrap_r) > np.mean(base_r), (store, np.mean(base_r), np.mean(wrap_r))
    assert np.mean(post_r) > np.mean(base_r), (store, np.mean(base_r), np.mean(post_r))


@pytest.mark.parametrize("store", ["chroma", "qdrant-cosine"])
def test_llama_index_store_side_filter_on_the_position_key_finds_the_conversation(store, vectors):
    """One Document per turn (as chat memories are indexed), the conversation given as the old ``doc_id``: the
    tagger writes ``fragrel_doc_id``, which a store-side filter finds; LlamaIndex itself overwrites ``doc_id`` in the
    store's metadata with each turn's own document id, so a filter on it finds nothing."""
    from llama_index.core import Document as LIDocument
    from llama_index.core.vector_stores import MetadataFilter, MetadataFilters

    from fragrel_integrations.llama_index import PositionTagger

    docs = [LIDocument(text=t, metadata={"doc_id": "chat"}) for t in TURNS]
    docs += [LIDocument(text=t, metadata={"doc_id": "other"}) for t in OTHER_TURNS]
    if store == "chroma":
        pytest.importorskip("llama_index.vector_stores.chroma")
        import chromadb
        from llama_index.vector_stores.chroma import ChromaVectorStore

        collection = chromadb.EphemeralClient().get_or_create_collection(f"fragrel-filter-{id(docs)}")
        vector_store = ChromaVectorStore(chroma_collection=collection)
    else:
        pytest.importorskip("llama_index.vector_stores.qdrant")
        from llama_index.vector_stores.qdrant import QdrantVectorStore
        from qdrant_client import QdrantClient

        vector_store = QdrantVectorStore(client=QdrantClient(location=":memory:"), collection_name="filter")
    index = VectorStoreIndex.from_documents(
        docs,
        storage_context=StorageContext.from_defaults(vector_store=vector_store),
        transformations=[PositionTagger()],
        embed_model=_li_embedding(vectors),
    )
    query = QUESTIONS[0][0]

    def found(key: str) -> list:
        filters = MetadataFilters(filters=[MetadataFilter(key=key, value="chat")])
        return index.as_retriever(similarity_top_k=10, filters=filters).retrieve(query)

    hits = found("fragrel_doc_id")
    assert len(hits) == 10 and {n.node.metadata["fragrel_doc_id"] for n in hits} == {"chat"}
    assert found("doc_id") == []  # LlamaIndex's own doc_id: the turn's document id in the store's metadata
    wrapped = LIFragRel(
        index.as_retriever(filters=MetadataFilters(filters=[MetadataFilter(key="fragrel_doc_id", value="chat")]))
    )
    assert {n.node.metadata["fragrel_doc_id"] for n in wrapped.retrieve(query)} == {"chat"}
