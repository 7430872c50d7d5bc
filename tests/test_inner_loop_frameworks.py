"""The inner loop in both frameworks: LangChain ``InnerLoopRunnable`` and LlamaIndex ``InnerLoopQueryEngine``,
end to end with real framework components (vector stores, retrievers, callbacks) and fake or scripted models;
one slow test runs the embedded SmolLM2 with the real embedder."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import numpy as np
import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForRetrieverRun
from langchain_core.documents import Document as LCDocument
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.retrievers import BaseRetriever as LCBaseRetriever
from langchain_core.runnables import Runnable, RunnableLambda
from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core import Document as LIDocument
from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever as LIBaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.response.schema import Response
from llama_index.core.llms import MockLLM
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.query_engine import CustomQueryEngine
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from pydantic import Field, PrivateAttr, ValidationError

from fragrel_integrations import FragRelIndex
from fragrel_integrations.core.inner_loop import InnerLoopEngine, InnerLoopError
from fragrel_integrations.langchain.inner_loop import InnerLoopRunnable
from fragrel_integrations.langchain.retriever import FragRelIndexRetriever as LCFragRelIndexRetriever
from fragrel_integrations.llama_index.inner_loop import InnerLoopQueryEngine
from fragrel_integrations.llama_index.retriever import FragRelIndexRetriever as LIFragRelIndexRetriever
from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel

# An original bAbI-style story: one fact per line, in order.
STORY = [
    "Mary went to the kitchen.",
    "Mary picked up the apple there.",
    "John travelled to the office.",
    "Mary walked to the garden.",
    "John grabbed the milk.",
    "Sandra moved to the hallway.",
    "John went back to the bedroom.",
    "Sandra journeyed to the cellar.",
]
QUESTION = "Where is the apple?"
FIRST = "Mary picked up the apple there."  # a first memory
ANSWER = "Mary walked to the garden."  # a shown sentence: a supported answer (a free restatement is not)


class HashEmbeddings(Embeddings):
    """LangChain Embeddings over the deterministic hashed bag-of-words embedder."""

    def __init__(self) -> None:
        self._emb = HashingEmbedder(dim=128)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._emb.embed_documents(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self._emb.embed_query(text).tolist()


class HashEmbedding(BaseEmbedding):
    """LlamaIndex embedding model over the deterministic hashed bag-of-words embedder."""

    _emb: HashingEmbedder = PrivateAttr(default_factory=lambda: HashingEmbedder(dim=128))

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._emb.embed_query(query).tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._emb.embed_query(text).tolist()


class RecordingChatModel(BaseChatModel):
    """A real LangChain chat model that replies from a list and records what it was sent."""

    replies: list[str]
    calls: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "recording"

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs: Any) -> ChatResult:
        self.calls.append({"messages": messages, "stop": stop, **kwargs})
        reply = self.replies[min(len(self.calls), len(self.replies)) - 1]
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=reply))])


class LCListRetriever(LCBaseRetriever):
    """A LangChain BaseRetriever returning a fixed list; records the mode and the query of every call."""

    documents: list[LCDocument]
    calls: list[tuple[str, str]] = Field(default_factory=list)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[LCDocument]:
        self.calls.append(("sync", query))
        return list(self.documents)

    async def _aget_relevant_documents(self, query: str, *, run_manager: Any) -> list[LCDocument]:
        self.calls.append(("async", query))
        await asyncio.sleep(0)
        return list(self.documents)


class LIListRetriever(LIBaseRetriever):
    """A LlamaIndex retriever returning fixed nodes; records the mode and query of every call."""

    def __init__(self, nodes: list[NodeWithScore]) -> None:
        self.nodes = nodes
        self.calls: list[tuple[str, str]] = []
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.calls.append(("sync", query_bundle.query_str))
        return list(self.nodes)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.calls.append(("async", query_bundle.query_str))
        await asyncio.sleep(0)
        return list(self.nodes)


class Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.chains: list[tuple[Any, Any, str]] = []
        self.retrievers: list[tuple[Any, Any]] = []

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, **kwargs) -> None:
        self.chains.append((run_id, parent_run_id, kwargs.get("name")))

    def on_retriever_start(self, serialized, query, *, run_id, parent_run_id=None, **kwargs) -> None:
        self.retrievers.append((run_id, parent_run_id))


def lc_story_docs() -> list[LCDocument]:
    return [LCDocument(page_content=t, id=f"s{i}", metadata={"line": i}) for i, t in enumerate(STORY)]


def lc_vector_retriever(k: int = 3):
    store = InMemoryVectorStore(HashEmbeddings())
    store.add_documents(lc_story_docs())
    return store.as_retriever(search_kwargs={"k": k})


def li_nodes() -> list[NodeWithScore]:
    """Story nodes located as PositionTagger would write them (location hidden from the LLM text)."""
    hidden = ["doc_id", "position"]
    nodes = [
        TextNode(id_=f"n{i}", text=t, metadata={"doc_id": "story", "position": i}, excluded_llm_metadata_keys=hidden)
        for i, t in enumerate(STORY)
    ]
    return [NodeWithScore(node=n, score=1.0 / (i + 1)) for i, n in enumerate(nodes)]


# ====================================================================================================== LangChain


def test_langchain_end_to_end_with_a_vector_store_and_a_fake_chat_model():
    model = FakeListChatModel(responses=[FIRST, ANSWER, ANSWER])
    loop = InnerLoopRunnable(retriever=lc_vector_retriever(), model=model)
    assert isinstance(loop, Runnable)
    out = loop.invoke(QUESTION)
    assert out["answer"] == ANSWER and out["converged"] and out["stop_reason"] == "converged"
    assert out["question"] == QUESTION and len(out["rounds"]) == 3
    first = out["rounds"][0]
    assert first["query"] == QUESTION and first["similarity"] is None and first["stm"] == FIRST
    assert out["rounds"][1]["query"] == QUESTION + "\n" + FIRST
    # the Documents are the vector store's own
    assert all(isinstance(d, LCDocument) and d.id and d.id.startswith("s") for d in first["documents"])
    assert len(first["documents"]) == 3 and first["documents"] == first["retrieved"]
    ids = [d.id for d in out["documents"]]
    assert len(ids) == len(set(ids)) and set(ids) <= {f"s{i}" for i in range(len(STORY))}


def test_langchain_chat_model_receives_the_prompt_and_limits():
    model = RecordingChatModel(replies=["The apple is in the garden."])
    retriever = LCListRetriever(documents=lc_story_docs()[:4])
    out = InnerLoopRunnable(retriever=retriever, model=model, max_stm_tokens=40).invoke({"question": QUESTION})
    assert out["converged"] and len(model.calls) == 2
    messages = model.calls[0]["messages"]
    assert [m.type for m in messages] == ["system", "human"]
    assert (
        "[4] Mary walked to the garden." in messages[1].content and "Your memory so far: (empty)" in messages[1].content
    )
    assert model.calls[0]["max_tokens"] == 40
    assert "Your memory so far: The apple is in the garden." in model.calls[1]["messages"][1].content
    assert retriever.calls == [("sync", QUESTION), ("sync", QUESTION + "\nThe apple is in the garden.")]


async def test_langchain_ainvoke_uses_the_async_retriever():
    retriever = LCListRetriever(documents=lc_story_docs()[:3])
    loop = InnerLoopRunnable(retriever=retriever, model=FakeListChatModel(responses=[ANSWER]))
    out = await loop.ainvoke(QUESTION)
    assert out["answer"] == ANSWER and out["converged"]
    assert [mode for mode, _ in retriever.calls] == ["async", "async"]


def test_langchain_stream_yields_one_update_per_round():
    model = FakeListChatModel(responses=["one guess", "second idea here", "third answer now"])
    loop = InnerLoopRunnable(retriever=lc_vector_retriever(), model=model, max_loops=3)
    updates = list(loop.stream(QUESTION))
    assert [len(u["rounds"]) for u in updates] == [1, 2, 3]
    assert [u["stop_reason"] for u in updates] == [None, None, "max_loops"]
    assert [u["answer"] for u in updates] == ["one guess", "second idea here", "third answer now"]
    model2 = FakeListChatModel(responses=["one guess", "second idea here", "third answer now"])
    final = InnerLoopRunnable(retriever=lc_vector_retriever(), model=model2, max_loops=3).invoke(QUESTION)
    assert {k: v for k, v in updates[-1].items() if k != "rounds"} == {k: v for k, v in final.items() if k != "rounds"}


async def test_langchain_astream():
    retriever = LCListRetriever(documents=lc_story_docs()[:2])
    loop = InnerLoopRunnable(retriever=retriever, model=FakeListChatModel(responses=["a b c", "a b c"]))
    updates = [u async for u in loop.astream({"question": QUESTION})]
    assert [u["stop_reason"] for u in updates] == [None, "converged"]
    assert {mode for mode, _ in retriever.calls} == {"async"}


def test_langchain_callbacks_nest_the_retriever_under_the_loop():
    recorder = Recorder()
    loop = InnerLoopRunnable(retriever=lc_vector_retriever(), model=ScriptedChatModel([ANSWER], cycle=True))
    loop.invoke(QUESTION, {"callbacks": [recorder], "run_name": "inner-loop"})
    roots = [run_id for run_id, parent, name in recorder.chains if name == "inner-loop"]
    assert len(roots) == 1 and len(recorder.retrievers) == 2
    assert all(parent == roots[0] for _, parent in recorder.retrievers)
    recorder2 = Recorder()
    list(loop.stream(QUESTION, {"callbacks": [recorder2]}))
    assert len(recorder2.retrievers) == 2 and all(p is not None for _, p in recorder2.retrievers)


def test_langchain_composes_and_batches():
    loop = InnerLoopRunnable(retriever=lc_vector_retriever(), model=ScriptedChatModel([ANSWER], cycle=True))
    chain = RunnableLambda(lambda q: {"question": q}) | loop | RunnableLambda(lambda out: out["answer"])
    assert chain.invoke(QUESTION) == ANSWER
    assert chain.batch([QUESTION, "Where is the milk?"]) == [ANSWER, ANSWER]
    plain = InnerLoopRunnable(retriever=lambda q: lc_story_docs()[:1], model=ScriptedChatModel(["x"], cycle=True))
    assert plain.invoke(QUESTION)["rounds"][0]["documents"][0].id == "s0"


def test_langchain_with_a_fragrel_retriever_and_dedupe():
    retriever = LCFragRelIndexRetriever.from_texts(
        [" ".join(STORY)], fragment_words=6, embedder=HashingEmbedder(dim=128), k=3, show_progress=False
    )
    model = FakeListChatModel(responses=[FIRST, "Mary took the apple to the garden.", ANSWER])
    out = InnerLoopRunnable(retriever=retriever, model=model, dedupe=True, max_loops=3, threshold=1.0).invoke(QUESTION)
    shown = [
        (d.metadata["fragrel_doc_id"], d.metadata["fragrel_position"]) for r in out["rounds"] for d in r["documents"]
    ]
    assert len(shown) == len(set(shown))  # nothing shown twice
    assert all("relevance_score" in d.metadata for d in out["documents"])
    assert len(out["documents"]) == len(shown)


def test_langchain_accepts_a_built_core_engine():
    index = FragRelIndex.from_fragments(STORY, embedder=HashingEmbedder(dim=128), show_progress=False)
    engine = InnerLoopEngine(index, ScriptedChatModel([ANSWER], cycle=True), max_loops=4)
    out = InnerLoopRunnable(engine=engine).invoke(QUESTION)
    assert out["converged"] and out["answer"] == ANSWER
    doc = out["rounds"][0]["documents"][0]
    assert isinstance(doc, LCDocument) and {"fragrel_doc_id", "fragrel_position", "relevance_score"} <= set(
        doc.metadata
    )
    # a LangChain retriever replaces the engine's own; settings given next to the engine override it
    retriever = LCListRetriever(documents=lc_story_docs()[:2])
    loop = InnerLoopRunnable(engine=engine, retriever=retriever, max_loops=1)
    assert loop.core_engine.max_loops == 1 and engine.max_loops == 4
    out = loop.invoke(QUESTION)
    assert out["stop_reason"] == "max_loops" and out["rounds"][0]["documents"][0].id == "s0"


def test_langchain_model_error_keeps_the_trace():
    model = ScriptedChatModel([FIRST, RuntimeError("model crashed")])
    loop = InnerLoopRunnable(retriever=lc_vector_retriever(), model=model)
    with pytest.raises(InnerLoopError) as info:
        loop.invoke(QUESTION)
    assert len(info.value.result.rounds) == 1
    output = info.value.output
    assert output["stop_reason"] == "error" and output["answer"] == FIRST
    assert output["rounds"][0]["documents"][0].id.startswith("s")


def test_langchain_empty_reply():
    out = InnerLoopRunnable(retriever=lc_vector_retriever(), model=FakeListChatModel(responses=["", "x"])).invoke(
        QUESTION
    )
    assert (out["answer"], out["stop_reason"], out["converged"]) == ("", "empty_reply", False)


def test_langchain_bad_construction_and_input():
    retriever = lc_vector_retriever()
    with pytest.raises(ValidationError, match="model is required"):
        InnerLoopRunnable(retriever=retriever)
    with pytest.raises(ValidationError, match="retriever is required"):
        InnerLoopRunnable(model=ScriptedChatModel(["a"]))
    with pytest.raises(ValidationError, match="max_loops must be an int >= 1"):
        InnerLoopRunnable(retriever=retriever, model=ScriptedChatModel(["a"]), max_loops=0)
    engine = InnerLoopEngine(None, ScriptedChatModel(["a"]))
    with pytest.raises(ValidationError, match="not both"):
        InnerLoopRunnable(engine=engine, model=ScriptedChatModel(["a"]), retriever=retriever)
    with pytest.raises(ValidationError, match="engine has no retriever"):
        InnerLoopRunnable(engine=engine)
    with pytest.raises(ValidationError):
        InnerLoopRunnable(retriever=retriever, model=ScriptedChatModel(["a"]), unknown_field=1)
    with pytest.raises(TypeError, match="cannot use"):
        InnerLoopRunnable(retriever=retriever, model=object())
    loop = InnerLoopRunnable(retriever=retriever, model=ScriptedChatModel(["a"], cycle=True))
    with pytest.raises(TypeError, match='"question"'):
        loop.invoke({"query": QUESTION})
    with pytest.raises(TypeError, match="question string"):
        loop.invoke(42)
    with pytest.raises(ValueError, match=r"question is (empty|blank)"):
        loop.invoke("  ")
    with pytest.raises(TypeError, match="no extra call arguments"):
        loop.invoke(QUESTION, k=3)


# ====================================================================================================== LlamaIndex


def li_vector_retriever(k: int = 3):
    docs = [LIDocument(text=" ".join(STORY), id_="story")]
    index = VectorStoreIndex.from_documents(
        docs, transformations=[SentenceSplitter(chunk_size=24, chunk_overlap=0)], embed_model=HashEmbedding()
    )
    return index.as_retriever(similarity_top_k=k)


def test_llama_index_end_to_end_with_a_vector_index_and_mock_llm():
    engine = InnerLoopQueryEngine(li_vector_retriever(), MockLLM(max_tokens=6))
    assert isinstance(engine, CustomQueryEngine)
    response = engine.query(QUESTION)
    assert isinstance(response, Response)
    meta = response.metadata
    assert meta["answer"] == "text text text text text text" and meta["supported"] is False  # the mock's words
    assert response.response == "Not supported by the retrieved text (the model's answer): " + meta["answer"]
    assert meta["converged"] and meta["stop_reason"] == "converged" and meta["n_rounds"] == 2
    trace = json.loads(json.dumps(meta["inner_loop"]))
    assert [r["index"] for r in trace["rounds"]] == [1, 2]
    assert trace["rounds"][1]["query"] == QUESTION + "\ntext text text text text text"
    assert response.source_nodes and all(isinstance(n, NodeWithScore) for n in response.source_nodes)
    ids = [n.node.node_id for n in response.source_nodes]
    assert len(ids) == len(set(ids))
    assert all(n.node.ref_doc_id == "story" for n in response.source_nodes)  # the index's own nodes


def test_llama_index_scripted_model_sees_the_nodes_and_the_memory():
    retriever = LIListRetriever(li_nodes()[:4])
    model = ScriptedChatModel([FIRST, ANSWER, ANSWER])
    response = InnerLoopQueryEngine(retriever, model).query(QueryBundle(QUESTION))
    assert str(response) == ANSWER and response.metadata["n_rounds"] == 3
    assert "[2] Mary picked up the apple there." in model.calls[0]["messages"][-1]["content"]
    assert "Your memory so far: Mary picked up the apple there." in model.calls[1]["messages"][-1]["content"]
    assert [q for _, q in retriever.calls] == [QUESTION, QUESTION + "\n" + FIRST, QUESTION + "\n" + ANSWER]
    assert [n.node.node_id for n in response.source_nodes] == ["n0", "n1", "n2", "n3"]
    assert response.source_nodes[0] is retriever.nodes[0]


async def test_llama_index_aquery_uses_aretrieve_and_the_async_llm():
    retriever = LIListRetriever(li_nodes()[:4])
    model = ScriptedChatModel([ANSWER], cycle=True)
    response = await InnerLoopQueryEngine(retriever, model).aquery(QUESTION)
    assert str(response) == ANSWER and response.metadata["converged"] and response.metadata["supported"]
    assert {mode for mode, _ in retriever.calls} == {"async"}
    response = await InnerLoopQueryEngine(li_vector_retriever(), MockLLM(max_tokens=3)).aquery(QUESTION)
    assert response.metadata["answer"] == "text text text" and str(response).startswith("Not supported")


def test_llama_index_dedupe_and_limits():
    retriever = LIListRetriever(li_nodes()[:3])
    model = ScriptedChatModel(["guess one", "second guess here", "third different answer"])
    response = InnerLoopQueryEngine(retriever, model, dedupe=True, max_loops=3).query(QUESTION)
    rounds = response.metadata["inner_loop"]["rounds"]
    assert [sum(x["shown"] for x in r["retrieved"]) for r in rounds] == [3, 0, 0]
    assert response.metadata["stop_reason"] == "max_loops" and len(response.source_nodes) == 3


def test_llama_index_with_a_fragrel_index_retriever():
    retriever = LIFragRelIndexRetriever.from_texts(
        [" ".join(STORY)], fragment_words=6, embedder=HashingEmbedder(dim=128), similarity_top_k=3, show_progress=False
    )
    response = InnerLoopQueryEngine(retriever, ScriptedChatModel([ANSWER], cycle=True)).query(QUESTION)
    assert response.metadata["converged"]
    assert all("relevance_score" in n.node.metadata for n in response.source_nodes)


def test_llama_index_accepts_a_built_core_engine():
    index = FragRelIndex.from_fragments(STORY, embedder=HashingEmbedder(dim=128), show_progress=False)
    core = InnerLoopEngine(index, ScriptedChatModel([ANSWER], cycle=True))
    response = InnerLoopQueryEngine(engine=core).query(QUESTION)
    assert str(response) == ANSWER
    node = response.source_nodes[0]
    assert {"fragrel_doc_id", "fragrel_position", "relevance_score"} <= set(node.node.metadata)
    engine = InnerLoopQueryEngine(LIListRetriever(li_nodes()[:1]), engine=core, max_loops=1)
    assert engine.core_engine.max_loops == 1
    assert engine.query(QUESTION).source_nodes[0].node.node_id == "n0"


def test_llama_index_model_error_keeps_the_trace():
    model = ScriptedChatModel([FIRST, ValueError("bad gateway")])
    engine = InnerLoopQueryEngine(LIListRetriever(li_nodes()[:2]), model)
    with pytest.raises(InnerLoopError) as info:
        engine.query(QUESTION)
    partial = info.value.output
    assert isinstance(partial, Response) and partial.response == FIRST
    assert partial.metadata["stop_reason"] == "error" and len(partial.source_nodes) == 2


def test_llama_index_bad_construction():
    with pytest.raises(TypeError, match="BaseRetriever"):
        InnerLoopQueryEngine(lambda q: [], ScriptedChatModel(["a"]))
    with pytest.raises(ValueError, match="llm is required"):
        InnerLoopQueryEngine(LIListRetriever([]))
    with pytest.raises(ValueError, match="retriever is required"):
        InnerLoopQueryEngine(None, ScriptedChatModel(["a"]))
    with pytest.raises(ValueError, match="threshold"):
        InnerLoopQueryEngine(LIListRetriever([]), ScriptedChatModel(["a"]), threshold=2)
    with pytest.raises(ValueError, match="not both"):
        InnerLoopQueryEngine(LIListRetriever([]), ScriptedChatModel(["a"]), engine=InnerLoopEngine(None, MockLLM()))
    with pytest.raises(ValueError, match=r"question is (empty|blank)"):
        InnerLoopQueryEngine(LIListRetriever([]), ScriptedChatModel(["a"])).query("")


# ====================================================================================================== real model


@pytest.mark.slow
def test_real_embedded_llm_and_embedder(real_embedder):
    """SmolLM2-135M (llama.cpp) + all-MiniLM-L6-v2 through LangChain: only robust properties are checked."""
    from fragrel_integrations.models.transformers_chat import TransformersChatModel

    start = time.perf_counter()
    index = FragRelIndex.from_fragments(STORY, embedder=real_embedder, show_progress=False)
    model = TransformersChatModel(context_window=2048)
    try:
        retriever = LCFragRelIndexRetriever(index=index, k=3)
        loop = InnerLoopRunnable(retriever=retriever, model=model, max_loops=3, max_stm_tokens=48)
        out = loop.invoke(QUESTION)
    finally:
        model.close()
    elapsed = time.perf_counter() - start
    assert isinstance(out["answer"], str) and out["answer"].strip()
    assert 1 <= len(out["rounds"]) <= 3
    assert out["stop_reason"] in {"converged", "max_loops", "empty_reply"}
    assert out["converged"] == (out["stop_reason"] == "converged")
    for i, r in enumerate(out["rounds"], start=1):
        assert r["index"] == i and r["query"].startswith(QUESTION)
        assert len(r["retrieved"]) == 3 and r["documents"]
        assert isinstance(r["reply"], str) and isinstance(r["stm"], str)
        assert (r["similarity"] is None) == (i == 1) or out["stop_reason"] == "empty_reply"
    assert out["rounds"][-1]["stm"] == out["answer"]
    assert np.isfinite([d.metadata["relevance_score"] for d in out["documents"]]).all()
    assert elapsed < 120  # generous: a shared machine; typically a few seconds
