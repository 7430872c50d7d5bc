"""SCM memory with an external vector index (issue #8): the stream stays the record of every turn, a LangChain
``VectorStore`` or a LlamaIndex vector store finds the candidate turns for memory activation."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("langchain")
pytest.importorskip("llama_index.core")

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore
from langgraph.checkpoint.memory import InMemorySaver
from llama_index.core.base.llms.types import MessageRole
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms.mock import MockLLMWithChatMemoryOfLastCall
from llama_index.core.vector_stores import SimpleVectorStore
from pydantic import Field

from fragrel_integrations.core.relations import ContextRelation
from fragrel_integrations.core.scm import (
    InMemoryStreamIndex,
    MemoryItem,
    SCMIndexError,
    SCMStream,
    SelfControlledMemory,
    StreamIndex,
)
from fragrel_integrations.langchain import scm_index as lc_scm_index
from fragrel_integrations.langchain.embeddings import MiniLMEmbeddings
from fragrel_integrations.langchain.scm_index import VectorStoreStreamIndex as LCIndex
from fragrel_integrations.langchain.scm_middleware import SCMMiddleware
from fragrel_integrations.llama_index import scm_index as li_scm_index
from fragrel_integrations.llama_index.scm_index import VectorStoreStreamIndex as LIIndex
from fragrel_integrations.llama_index.scm_memory import SCMMemory
from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel

DIM = 128
TURNS = [
    ("My cat is called Miso and she is grey.", "Miso is a lovely name."),
    ("I work as a nurse in Lisbon.", "Nursing is demanding work."),
    ("My favourite dessert is lemon tart.", "Lemon tart is delicious."),
    ("I am learning to play the cello.", "The cello has a warm sound."),
    ("My cat Miso sleeps on the cello case.", "Cats love warm spots."),  # the flash turn: also about the cat
]
QUESTION = "What is my cat called?"


def controller() -> ScriptedChatModel:
    """Says yes to every yes/no question; a summary is the user line (the 'Summary:' label is stripped)."""

    def respond(messages):
        text = messages[-1]["content"]
        if "yes or no" in text:
            return "Yes."
        user = next((line for line in text.splitlines() if line.startswith("User: ")), "User: ?")
        return "Summary: " + user[6:]

    return ScriptedChatModel(respond)


def lc_store() -> InMemoryVectorStore:
    return InMemoryVectorStore(MiniLMEmbeddings(HashingEmbedder(dim=DIM)))


def memory_with(index=None, *, turns=TURNS, session_id="ana", **kwargs) -> SelfControlledMemory:
    memory = SelfControlledMemory(controller(), embedder=HashingEmbedder(dim=DIM), index=index, **kwargs)
    for observation, response in turns:
        memory.record(observation, response, session_id=session_id)
    return memory


class Spy:
    """A StreamIndex that records every call and delegates to another index."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.added: list[tuple[MemoryItem, str, np.ndarray]] = []
        self.searches: list[tuple[str, str, int]] = []
        self.deleted: list[str] = []

    def add(self, item, text, embedding):
        self.added.append((item, text, embedding))
        self.inner.add(item, text, embedding)

    def search(self, session_id, query, embedding, k):
        self.searches.append((session_id, query, k))
        return self.inner.search(session_id, query, embedding, k)

    def delete_session(self, session_id):
        self.deleted.append(session_id)
        self.inner.delete_session(session_id)


class Flaky(InMemoryStreamIndex):
    """An in-memory index whose add / delete fail while ``down``."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def add(self, item, text, embedding):
        if self.down:
            raise ConnectionError("vector database unreachable")
        super().add(item, text, embedding)

    def delete_session(self, session_id):
        if self.down:
            raise ConnectionError("vector database unreachable")
        super().delete_session(session_id)


class FixedPool:
    """A StreamIndex that always answers the same hits (to pin the pool)."""

    def __init__(self, hits) -> None:
        self.hits = hits
        self.ks: list[int] = []

    def add(self, item, text, embedding):
        pass

    def search(self, session_id, query, embedding, k):
        self.ks.append(k)
        return list(self.hits) if isinstance(self.hits, list) else self.hits

    def delete_session(self, session_id):
        pass


def observations(context) -> list[str]:
    return [m.item.observation for m in context.memories]


# ------------------------------------------------------------------------------------------ core


def test_public_names():
    assert lc_scm_index.__all__ == ["VectorStoreStreamIndex"]
    assert li_scm_index.__all__ == ["VectorStoreStreamIndex"]
    for index in (InMemoryStreamIndex(), LCIndex(lc_store()), LIIndex(SimpleVectorStore())):
        assert isinstance(index, StreamIndex)


def test_write_back_adds_the_streams_text_and_embedding():
    spy = Spy(InMemoryStreamIndex())
    memory = memory_with(spy)
    stored = memory.history("ana")
    assert [item.index for item, _, _ in spy.added] == [0, 1, 2, 3, 4]
    for (_, text, embedding), kept in zip(spy.added, stored, strict=True):
        assert text == kept.summary == kept.observation  # the summary is what the stream embedded
        np.testing.assert_array_equal(embedding, kept.embedding)


def test_index_pool_is_k_plus_one_and_flash_is_excluded():
    spy = Spy(InMemoryStreamIndex())
    memory = memory_with(spy, k=1)
    context = memory.prepare(QUESTION, session_id="ana")
    assert spy.searches == [("ana", QUESTION, 2)]  # k + 1: the flash turn may take one slot
    assert context.flash.index == 4
    assert observations(context) == [TURNS[0][0]]
    # the flash turn is the index's best or second-best hit; it is never recalled as a memory
    assert 4 in [i for i, _ in spy.inner.search("ana", QUESTION, memory.embed_query(QUESTION), 2)]


def test_index_gives_the_same_memories_as_the_full_scan_for_dense_scores():
    plain = memory_with(k=2)
    indexed = memory_with(InMemoryStreamIndex(), k=2)
    for question in (QUESTION, "Where do I work?", "What dessert do I like?"):
        a, b = plain.prepare(question, session_id="ana"), indexed.prepare(question, session_id="ana")
        assert [(m.item.index, round(m.score, 6)) for m in a.memories] == [
            (m.item.index, round(m.score, 6)) for m in b.memories
        ]


def test_relation_and_bm25_are_scored_over_the_pool_only():
    pool = FixedPool([(4, 0.9), (1, 0.8), (99, 0.7), (2, 0.6), (1, 0.5)])  # flash, unknown and duplicate hits
    memory = memory_with(pool, k=2, relation=ContextRelation(0.8))
    context = memory.prepare(QUESTION, session_id="ana")
    assert pool.ks == [20]  # max(4 * k, 20) with a relation
    items = {it.index: it for it in memory.history("ana")}
    pooled = [items[1], items[2]]
    query = memory.embed_query(QUESTION)
    expected = memory.scores(query, pooled, np.stack([it.embedding for it in pooled]), QUESTION)
    assert [m.item.index for m in context.memories] == [1, 2]
    np.testing.assert_allclose([m.score for m in context.memories], expected)
    # the environment over the whole stream would differ: the pool really is the relation's universe
    full = memory.scores(query, list(items.values())[:-1], np.stack([it.embedding for it in items.values()][:-1]))
    assert not np.allclose(expected, full[[1, 2]])

    bm25 = FixedPool([(0, 1.0), (3, 0.5)])
    memory = memory_with(bm25, k=1, scorer="bm25", pool=7)
    assert observations(memory.prepare(QUESTION, session_id="ana")) == [TURNS[0][0]]
    assert bm25.ks == [7]
    assert memory_with(FixedPool([]), k=3, scorer="hybrid").pool_size == 20


def test_reindex_an_existing_stream(tmp_path):
    path = tmp_path / "scm.sqlite"
    memory_with(stream=str(path))  # written without an index
    index = InMemoryStreamIndex()
    memory = SelfControlledMemory(controller(), stream=path, embedder=HashingEmbedder(dim=DIM), index=index, k=1)
    with pytest.warns(RuntimeWarning, match=r"memory.reindex\('ana'\)"):
        assert memory.prepare(QUESTION, session_id="ana").memories == ()
    assert memory.reindex("ana") == len(TURNS)
    assert memory.reindex("ana") == len(TURNS) and len(index) == len(TURNS)  # idempotent
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert observations(memory.prepare(QUESTION, session_id="ana")) == [TURNS[0][0]]


def test_reindex_embeds_turns_stored_without_embedding():
    stream = SCMStream()
    stream.append("ana", "My cat is called Miso.", "Nice.", summary="The cat is Miso.")  # no embedding
    spy = Spy(InMemoryStreamIndex())
    memory = SelfControlledMemory(controller(), stream=stream, embedder=HashingEmbedder(dim=DIM), index=spy)
    assert memory.reindex("ana") == 1
    _, text, embedding = spy.added[0]
    assert text == "The cat is Miso." and embedding.shape == (DIM,)
    assert memory.history("ana")[0].embedding is None  # the stream is not changed


async def test_async_paths_use_the_index():
    spy = Spy(InMemoryStreamIndex())
    memory = SelfControlledMemory(controller(), embedder=HashingEmbedder(dim=DIM), index=spy, k=1)
    for observation, response in TURNS:
        await memory.arecord(observation, response, session_id="ana")
    context = await memory.aprepare(QUESTION, session_id="ana")
    assert observations(context) == [TURNS[0][0]] and len(spy.searches) == 1
    spy.inner.delete_session("ana")
    assert await memory.areindex("ana") == len(TURNS)


def test_index_add_failure_loses_no_turn():
    index = Flaky()
    memory = memory_with(index, turns=TURNS[:2])
    index.down = True
    with pytest.raises(SCMIndexError, match=r"saved in the stream.*memory.reindex\('ana'\)") as failure:
        memory.record(*TURNS[2], session_id="ana")
    assert isinstance(failure.value.__cause__, ConnectionError)
    assert failure.value.item.index == 2 and failure.value.session_id == "ana"
    assert [i.observation for i in memory.history("ana")] == [t[0] for t in TURNS[:3]]  # the turn is stored
    with pytest.raises(SCMIndexError) as failure:  # a whole chat turn: the reply travels with the error
        memory.chat("And my dessert?", session_id="ana", model=ScriptedChatModel(["Lemon tart."]))
    assert failure.value.item.response == "Lemon tart." and memory.history("ana")[-1].response == "Lemon tart."
    with pytest.raises(SCMIndexError, match="reindexing stopped"):
        memory.reindex("ana")
    with pytest.raises(ConnectionError):  # clear: the index goes first, so the stream is untouched
        memory.clear("ana")
    assert len(memory.history("ana")) == 4
    index.down = False
    assert memory.reindex("ana") == 4 and len(index) == 4


def test_clear_deletes_the_sessions_index_entries():
    spy = Spy(InMemoryStreamIndex())
    memory = memory_with(spy)
    memory_with(spy, session_id="bob", turns=TURNS[:2]).record("x", "y", session_id="bob")
    assert memory.clear("ana") == len(TURNS)
    assert spy.deleted == ["ana"]
    assert spy.inner.search("ana", "cat", memory.embed_query("cat"), 10) == []
    assert len(spy.inner.search("bob", "cat", memory.embed_query("cat"), 10)) == 3


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(TypeError, match="VectorStoreStreamIndex"):
        SelfControlledMemory(controller(), index=lc_store())  # a raw vector store, not wrapped
    with pytest.raises(TypeError, match="StreamIndex"):
        SelfControlledMemory(controller(), index=object())
    with pytest.raises(ValueError, match="pool only applies with an index"):
        SelfControlledMemory(controller(), pool=10)
    with pytest.raises(ValueError, match=r"pool must be an int >= 4"):
        SelfControlledMemory(controller(), index=InMemoryStreamIndex(), k=3, pool=3)
    with pytest.raises(ValueError, match="reindex needs an index"):
        SelfControlledMemory(controller(), embedder=HashingEmbedder(dim=8)).reindex("ana")
    memory = memory_with(FixedPool([("one", 0.5)]))
    with pytest.raises(TypeError, match=r"\(interaction index, similarity\) pairs"):
        memory.prepare(QUESTION, session_id="ana")
    memory.index = FixedPool(None)
    with pytest.raises(TypeError, match="must return a list"):
        memory.prepare(QUESTION, session_id="ana")

    with pytest.raises(TypeError, match="LangChain VectorStore"):
        LCIndex(SimpleVectorStore())
    with pytest.raises(TypeError, match="LlamaIndex BasePydanticVectorStore"):
        LIIndex(lc_store())
    for cls, store in ((LCIndex, lc_store()), (LIIndex, SimpleVectorStore())):
        with pytest.raises(TypeError, match="session_key"):
            cls(store, session_key="")
        with pytest.raises(ValueError, match="must differ"):
            cls(store, session_key="k", index_key="k")
        with pytest.raises(ValueError, match="fetch_k"):
            cls(store, fetch_k=0)
        with pytest.raises(TypeError, match="make_id"):
            cls(store, make_id="scm")
        with pytest.raises(TypeError, match="session_id"):
            cls(store).search("", "q", np.ones(DIM), 3)
        with pytest.raises(ValueError, match="k must be"):
            cls(store).search("ana", "q", np.ones(DIM), 0)
        with pytest.raises(TypeError, match="make_id must return"):
            cls(store, make_id=lambda s, i: None).add(MemoryItem("ana", 0, "a", "b"), "a", np.ones(DIM))
    with pytest.raises(TypeError, match="filter must be a function"):
        LCIndex(lc_store(), filter={"scm_session": "ana"})
    with pytest.raises(TypeError, match="filters must be a function"):
        LIIndex(SimpleVectorStore(), filters="ana")
    with pytest.raises(TypeError, match="relevance_scores"):
        LCIndex(lc_store(), relevance_scores="yes")


# ------------------------------------------------------------------------------------------ LangChain


def test_langchain_turns_land_in_the_store_with_session_metadata():
    store = lc_store()
    memory = memory_with(LCIndex(store), k=1)
    assert sorted(store.store) == [f"scm:ana:{i}" for i in range(len(TURNS))]
    docs = store.get_by_ids(["scm:ana:0"])
    assert docs[0].metadata == {"scm_session": "ana", "scm_index": 0}
    assert docs[0].page_content == TURNS[0][0]  # the summary the stream embedded
    assert observations(memory.prepare(QUESTION, session_id="ana")) == [TURNS[0][0]]


def test_langchain_sessions_never_see_each_other_even_without_a_store_filter():
    store = lc_store()
    index = LCIndex(store, filter=lambda session_id: None)  # the store returns every session's documents
    memory = memory_with(index, k=2)
    for observation, response in [("My cat is called Tom.", "Hi Tom."), ("I live in Porto.", "Nice."), ("Hm.", "Ok")]:
        memory.record(observation, response, session_id="bob")
    query = memory.embed_query(QUESTION)
    unfiltered = store.similarity_search_with_score(QUESTION, k=len(TURNS) + 3)
    assert {d.metadata["scm_session"] for d, _ in unfiltered} == {"ana", "bob"}
    assert {i for i, _ in index.search("bob", QUESTION, query, 10)} <= {0, 1, 2}
    assert len(index.search("bob", QUESTION, query, 10)) == 3
    context = memory.prepare(QUESTION, session_id="bob")
    assert [m.item.session_id for m in context.memories] == ["bob"] * len(context.memories)
    assert "My cat is called Tom." in observations(context)
    # fetch_k over-fetches so post-filtering still fills k
    assert len(LCIndex(store, filter=lambda s: None, fetch_k=20).search("bob", QUESTION, query, 3)) == 3
    # the default filter (a callable for InMemoryVectorStore) and a dict-style custom one
    assert {i for i, _ in LCIndex(store).search("bob", QUESTION, query, 10)} == {0, 1, 2}


def test_langchain_default_filter_format_and_relevance_scores():
    class DictFilterStore(VectorStore):
        """A store that takes Chroma-style dict filters and defines a relevance function."""

        def __init__(self) -> None:
            self.inner = lc_store()
            self.filters: list = []

        def add_texts(self, texts, metadatas=None, *, ids=None, **kwargs):
            return self.inner.add_texts(texts, metadatas=metadatas, ids=ids)

        def similarity_search(self, query, k=4, **kwargs):
            return [d for d, _ in self.similarity_search_with_score(query, k, **kwargs)]

        def similarity_search_with_score(self, query, k=4, **kwargs):
            wanted = kwargs.pop("filter", None)
            self.filters.append(wanted)
            predicate = None if wanted is None else (lambda d: all(d.metadata.get(a) == b for a, b in wanted.items()))
            return self.inner.similarity_search_with_score(query, k=k, filter=predicate)

        def delete(self, ids=None, **kwargs):
            return self.inner.delete(ids)

        def _select_relevance_score_fn(self):
            return lambda score: (score + 1.0) / 2.0

        @classmethod
        def from_texts(cls, texts, embedding, metadatas=None, **kwargs):
            raise NotImplementedError

    store = DictFilterStore()
    index = LCIndex(store)
    memory = memory_with(index, k=1)
    hits = index.search("ana", QUESTION, memory.embed_query(QUESTION), 2)
    assert store.filters[-1] == {"scm_session": "ana"}
    raw = store.similarity_search_with_score(QUESTION, k=2, filter={"scm_session": "ana"})
    assert [s for _, s in hits] == pytest.approx([(s + 1.0) / 2.0 for _, s in raw])  # relevance scores
    assert [s for _, s in LCIndex(store, relevance_scores=False).search("ana", QUESTION, None, 2)] == pytest.approx(
        [s for _, s in raw]
    )
    # InMemoryVectorStore has no relevance function: raw cosine by default, an error when relevance is required
    plain = lc_store()
    memory_with(LCIndex(plain))
    assert len(LCIndex(plain).search("ana", QUESTION, None, 2)) == 2
    with pytest.raises(NotImplementedError):
        LCIndex(plain, relevance_scores=True).search("ana", QUESTION, None, 2)
    # a store without get_by_ids: clear deletes the ids this index added
    memory.clear("ana")
    assert store.inner.store == {}


def test_langchain_clear_deletes_documents_also_from_another_process():
    store = lc_store()
    memory = memory_with(LCIndex(store))
    memory_with(LCIndex(store), session_id="bob", turns=TURNS[:2])
    assert memory.clear("ana") == len(TURNS)
    assert sorted(store.store) == ["scm:bob:0", "scm:bob:1"]
    LCIndex(store).delete_session("bob")  # a fresh index object: finds the ids by probing get_by_ids
    assert store.store == {}


def test_langchain_reindex_and_custom_ids():
    import uuid

    def make_id(session_id, index):
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"scm:{session_id}:{index}"))

    store = lc_store()
    memory = memory_with(LCIndex(store, make_id=make_id), k=1)
    assert make_id("ana", 0) in store.store
    assert observations(memory.prepare(QUESTION, session_id="ana")) == [TURNS[0][0]]
    memory.reindex("ana")
    assert len(store.store) == len(TURNS)
    memory.clear("ana")
    assert store.store == {}


def test_langchain_middleware_end_to_end_with_an_index():
    class Recording(GenericFakeChatModel):
        seen: list = Field(default_factory=list)

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            self.seen.append(list(messages))
            return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)

    store = lc_store()
    middleware = SCMMiddleware(model=controller(), embedder=HashingEmbedder(dim=DIM), index=LCIndex(store), k=1)
    model = Recording(messages=iter([AIMessage(r) for r in ("Nice name.", "Lovely city.", "Your cat is Miso.")]))
    agent = create_agent(model, middleware=[middleware], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}
    for text in ["My cat is called Miso.", "I live in Lisbon.", QUESTION]:
        agent.invoke({"messages": [{"role": "user", "content": text}]}, config)
    assert sorted(store.store) == ["scm:t1:0", "scm:t1:1", "scm:t1:2"]
    assert {d.metadata["scm_session"] for d in store.get_by_ids(sorted(store.store))} == {"t1"}
    system = model.seen[-1][0].content
    assert "[turn 0] User: My cat is called Miso.\nAssistant: Nice name." in system
    assert "Previous turn:\nUser: I live in Lisbon." in system
    with pytest.raises(ValueError, match="not both"):
        SCMMiddleware(memory_with(), index=LCIndex(store))


# ------------------------------------------------------------------------------------------ LlamaIndex


def test_llama_index_nodes_activation_isolation_and_delete():
    store = SimpleVectorStore()
    index = LIIndex(store, filters=lambda session_id: None)  # no store filter: post-filtering by node id
    memory = memory_with(index, k=1)
    memory_with(index, session_id="bob", turns=[("My cat is called Tom.", "Hi."), ("I live in Porto.", "Ok.")])
    assert sorted(store.data.embedding_dict) == [f"scm:ana:{i}" for i in range(5)] + ["scm:bob:0", "scm:bob:1"]
    meta = store.data.metadata_dict["scm:ana:0"]
    assert meta["scm_session"] == "ana" and meta["scm_index"] == 0 and meta["ref_doc_id"] == "scm:ana"
    np.testing.assert_allclose(store.data.embedding_dict["scm:ana:0"], memory.history("ana")[0].embedding, rtol=1e-6)
    assert observations(memory.prepare(QUESTION, session_id="ana")) == [TURNS[0][0]]
    query = memory.embed_query(QUESTION)
    assert {i for i, _ in index.search("bob", QUESTION, query, 10)} == {0, 1}
    assert {i for i, _ in LIIndex(store).search("bob", QUESTION, query, 10)} == {0, 1}  # store-side filter
    assert memory.clear("ana") == len(TURNS)
    assert sorted(store.data.embedding_dict) == ["scm:bob:0", "scm:bob:1"]


def test_llama_index_custom_ids_and_nodes_returning_store():
    class NodeStore(SimpleVectorStore):
        """Returns nodes with metadata, like Chroma or Qdrant (SimpleVectorStore returns ids only)."""

        def query(self, query, **kwargs):
            from llama_index.core.schema import TextNode

            result = super().query(query, **kwargs)
            result.nodes = [TextNode(id_=i, text="", metadata=self.data.metadata_dict[i]) for i in result.ids]
            return result

    store = NodeStore()
    index = LIIndex(store, make_id=lambda s, i: f"{s}-{i}", filters=lambda s: None)
    memory = memory_with(index, k=1)
    memory_with(index, session_id="bob", turns=TURNS[:2])
    assert "ana-0" in store.data.embedding_dict
    assert observations(memory.prepare(QUESTION, session_id="ana")) == [TURNS[0][0]]
    assert {i for i, _ in index.search("bob", QUESTION, memory.embed_query(QUESTION), 10)} == {0, 1}


def test_llama_index_scm_memory_end_to_end_with_an_index():
    store = SimpleVectorStore()
    memory = SCMMemory(llm=controller(), embedder=HashingEmbedder(dim=DIM), session_id="ana", index=LIIndex(store), k=1)
    llm = MockLLMWithChatMemoryOfLastCall()
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory)
    for text in ["My cat is called Miso.", "I live in Lisbon.", QUESTION]:
        engine.chat(text)
    sent = llm.last_chat_messages
    assert [m.role for m in sent] == [MessageRole.SYSTEM, MessageRole.USER]
    assert "[turn 0] User: My cat is called Miso." in sent[0].content
    assert sorted(store.data.embedding_dict) == ["scm:ana:0", "scm:ana:1", "scm:ana:2"]
    memory.reset()
    assert store.data.embedding_dict == {} and memory.core.history("ana") == []
