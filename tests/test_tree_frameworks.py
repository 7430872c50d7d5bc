"""The surprise tree as native LangChain and LlamaIndex retrievers (deterministic fakes)."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document as LCDocument
from langchain_core.retrievers import BaseRetriever as LCBaseRetriever
from langchain_tests.integration_tests import RetrieversIntegrationTests
from llama_index.core.base.base_retriever import BaseRetriever as LIBaseRetriever
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import Document as LIDocument
from llama_index.core.schema import NodeWithScore, TextNode
from test_tree_core import TOPICS, fake_reply, topic_docs

from fragrel_integrations.core.tree import SurpriseTree, load_tree, save_tree
from fragrel_integrations.langchain import surprise_tree as lc_module
from fragrel_integrations.langchain.surprise_tree import SurpriseTreeRetriever as LCRetriever
from fragrel_integrations.llama_index import surprise_tree as li_module
from fragrel_integrations.llama_index.surprise_tree import SurpriseExtractor
from fragrel_integrations.llama_index.surprise_tree import SurpriseTreeRetriever as LIRetriever
from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel

TREE_OPTIONS = {"chunk_tokens": 40, "summary_tokens": 40, "reduction_dim": 2, "max_cluster_tokens": 200}


def _options(**extra):
    return {"embedder": HashingEmbedder(dim=256), "show_progress": False, **TREE_OPTIONS, **extra}


def _tree() -> SurpriseTree:
    tree = SurpriseTree(ScriptedChatModel(fake_reply), **_options())
    docs = topic_docs()
    tree.build(list(docs.values()), doc_ids=list(docs))
    return tree


def test_public_names():
    assert lc_module.__all__ == ["SurpriseTreeRetriever", "hit_to_document"]
    assert li_module.__all__ == ["SurpriseExtractor", "SurpriseTreeRetriever", "hit_to_node"]


# ---------------------------------------------------------------------------------------------------- LangChain


def test_langchain_retriever_is_native_and_returns_documents():
    retriever = LCRetriever(tree=_tree(), k=3)
    assert isinstance(retriever, LCBaseRetriever)
    docs = retriever.invoke("rocket launch orbit astronaut")
    assert len(docs) == 3 and all(isinstance(d, LCDocument) for d in docs)
    scores = [d.metadata["relevance_score"] for d in docs]
    assert scores == sorted(scores, reverse=True)
    for d in docs:
        assert d.metadata["tree_field"] in ("text", "summary", "surprise")
        assert isinstance(d.metadata["tree_layer"], int)
        if d.metadata["tree_layer"] == 0:
            assert d.metadata["doc_id"] == "space" and isinstance(d.metadata["position"], int)
        assert d.id == f"surprise-tree:{d.metadata['tree_node_id']}:{d.metadata['tree_field']}"
    assert len(retriever.invoke("rocket", k=1)) == 1  # k as an invoke kwarg


def test_langchain_options_delegate_to_the_core():
    tree = _tree()
    only = LCRetriever(tree=tree, k=50, fields=("surprise",)).invoke("stock market")
    assert only and {d.metadata["tree_field"] for d in only} == {"surprise"}
    budget = LCRetriever(tree=tree, k=None, budget_tokens=50).invoke("stock market")
    assert sum(tree.count(d.page_content) for d in budget) <= 50
    walk = LCRetriever(tree=tree, k=10, mode="traversal", width=1).invoke("cat kitten purr")
    assert {d.metadata["doc_id"] for d in walk if d.metadata["tree_layer"] == 0} == {"cats"}
    core = [(h.node_id, h.field) for h in tree.retrieve("stock market", k=4)]
    via = [
        (d.metadata["tree_node_id"], d.metadata["tree_field"]) for d in LCRetriever(tree=tree).invoke("stock market")
    ]
    assert via == core
    with pytest.raises(ValueError, match="fields"):
        LCRetriever(tree=tree, fields=("body",))
    with pytest.raises(ValueError):
        LCRetriever(tree=tree, k=0)


def test_langchain_from_documents_and_add_documents():
    docs = [LCDocument(page_content=text, metadata={"source": name}) for name, text in topic_docs().items()]
    retriever = LCRetriever.from_documents(docs, chat_model=ScriptedChatModel(fake_reply), k=2, **_options())
    assert {n.doc_id for n in retriever.tree.leaves()} == set(TOPICS)
    assert all(n.metadata["source"] == n.doc_id for n in retriever.tree.leaves())
    report = retriever.add_documents([LCDocument(page_content="Kitten purr qqfresh whiskers.", metadata={"k": 1})])
    assert report.nodes_added >= 1
    top = retriever.invoke("qqfresh", k=5)
    assert any("qqfresh" in d.page_content for d in top)


async def test_langchain_async_inside_a_running_loop():
    retriever = await LCRetriever.afrom_texts(
        list(topic_docs().values()), chat_model=ScriptedChatModel(fake_reply), k=2, **_options(max_concurrency=2)
    )
    docs = await retriever.ainvoke("stock market shares")
    assert len(docs) == 2
    sync_docs = retriever.invoke("stock market shares")  # sync call from inside the loop works too
    assert [d.id for d in sync_docs] == [d.id for d in docs]
    built = LCRetriever.from_texts(["Cats purr."], chat_model=ScriptedChatModel(fake_reply), **_options())
    assert built.invoke("cats")
    await retriever.aadd_documents([LCDocument(page_content="Rocket capsule qqasync.")])
    assert any("qqasync" in d.page_content for d in await retriever.ainvoke("qqasync", k=5))


def test_langchain_accepts_a_loaded_tree(tmp_path):
    tree = _tree()
    save_tree(tree, tmp_path / "t.sqlite")
    loaded = load_tree(tmp_path / "t.sqlite", embedder=HashingEmbedder(dim=256))
    a = [d.id for d in LCRetriever(tree=tree).invoke("kitten")]
    b = [d.id for d in LCRetriever(tree=loaded).invoke("kitten")]
    assert a == b


class TestSurpriseTreeRetrieverStandard(RetrieversIntegrationTests):
    """LangChain's own retriever contract (k as a field and an invoke kwarg, sync and async)."""

    @property
    def retriever_constructor(self) -> type[LCRetriever]:
        return LCRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        return {"tree": _tree()}

    @property
    def retriever_query_example(self) -> str:
        return "rocket launch orbit"


# ---------------------------------------------------------------------------------------------------- LlamaIndex


def test_llama_index_retriever_is_native_and_returns_nodes():
    retriever = LIRetriever(_tree(), similarity_top_k=3)
    assert isinstance(retriever, LIBaseRetriever)
    nodes = retriever.retrieve("rocket launch orbit astronaut")
    assert len(nodes) == 3 and all(isinstance(n, NodeWithScore) for n in nodes)
    assert [n.score for n in nodes] == sorted((n.score for n in nodes), reverse=True)
    for n in nodes:
        meta = n.node.metadata
        assert meta["relevance_score"] == n.score
        if meta["tree_layer"] == 0:
            assert meta["doc_id"] == "space"
        assert "tree_node_id" not in n.node.get_content(metadata_mode="llm")
    assert len(LIRetriever(_tree(), k=1).retrieve("rocket")) == 1


def test_llama_index_validation_and_options():
    tree = _tree()
    with pytest.raises(TypeError, match="SurpriseTree"):
        LIRetriever(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mode"):
        LIRetriever(tree, mode="flat")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fields"):
        LIRetriever(tree, fields=())
    with pytest.raises(ValueError, match="disagree"):
        LIRetriever(tree, similarity_top_k=2, k=3)
    walk = LIRetriever(tree, k=10, mode="traversal", width=1).retrieve("cat kitten purr")
    assert {n.node.metadata["doc_id"] for n in walk if n.node.metadata["tree_layer"] == 0} == {"cats"}
    with pytest.raises(TypeError, match=r"\['widht'\].*'width'"):  # a misspelt setting is not ignored
        LIRetriever(tree, widht=2)  # type: ignore[call-arg]


def test_both_retrievers_default_to_the_cores_search_settings():
    import inspect

    from fragrel_integrations.adapters.tree_search import SEARCH_DEFAULTS, SEARCH_OPTIONS

    tree = _tree()
    core = inspect.signature(SurpriseTree.retrieve).parameters
    lc, li = LCRetriever(tree=tree), LIRetriever(tree)
    for name in SEARCH_OPTIONS:
        assert getattr(lc, name) == getattr(li, name) == core[name].default == SEARCH_DEFAULTS[name], name


def test_llama_index_from_documents_and_insert():
    docs = [LIDocument(text=text, id_=name, metadata={"topic": name}) for name, text in topic_docs().items()]
    retriever = LIRetriever.from_documents(docs, chat_model=ScriptedChatModel(fake_reply), k=2, **_options())
    assert {n.doc_id for n in retriever.tree.leaves()} == set(TOPICS)
    retriever.insert([LIDocument(text="Stock dividend qqli investor.", id_="markets-2")])
    assert any("qqli" in n.node.get_content() for n in retriever.retrieve("qqli"))


async def test_llama_index_async_inside_a_running_loop():
    retriever = await LIRetriever.afrom_texts(
        list(topic_docs().values()), chat_model=ScriptedChatModel(fake_reply), similarity_top_k=2, **_options()
    )
    nodes = await retriever.aretrieve("stock market shares")
    assert len(nodes) == 2
    assert [n.node.node_id for n in retriever.retrieve("stock market shares")] == [n.node.node_id for n in nodes]
    await retriever.ainsert([LIDocument(text="Rocket capsule qqlia.", id_="space-9")])
    assert any("qqlia" in n.node.get_content() for n in await retriever.aretrieve("qqlia"))


def test_llama_index_extractor_in_an_ingestion_pipeline():
    model = ScriptedChatModel(fake_reply)
    extractor = SurpriseExtractor(model, summary_tokens=40, max_concurrency=2)
    pipeline = IngestionPipeline(transformations=[SentenceSplitter(chunk_size=64, chunk_overlap=0), extractor])
    nodes = pipeline.run(documents=[LIDocument(text=text) for text in topic_docs().values()])
    assert len(nodes) >= 3
    for node in nodes:
        assert node.metadata["tree_summary"] and node.metadata["tree_surprise"].startswith("oddly zzsurprise")
    assert extractor.report.llm_calls == len(model.calls) and extractor.report.parse_failures == 0


async def test_llama_index_extractor_async_and_failures():
    def flaky(messages):
        if "boom" in messages[-1]["content"]:
            raise RuntimeError("backend down")
        return "no sections at all"

    extractor = SurpriseExtractor(ScriptedChatModel(flaky))
    out = await extractor.aextract([TextNode(text="boom goes the server."), TextNode(text="A calm day.")])
    assert out[0]["tree_summary"] == "boom goes the server." and out[0]["tree_surprise"] == ""
    assert out[1] == {"tree_summary": "no sections at all", "tree_surprise": ""}
    assert extractor.report.call_failures == 1 and extractor.report.parse_failures == 1
    with pytest.raises(ValueError, match="chat_model"):
        SurpriseExtractor(None, summariser="llm")


# ---------------------------------------------------------------------------------------------------- FragRel option


def test_both_retrievers_pass_the_tree_relation_to_the_core():
    from fragrel_integrations.core.tree import TreeRelation

    tree = _tree()
    rel = TreeRelation()
    expected = [(h.node_id, h.field, h.score) for h in tree.retrieve("cat kitten", k=4, relation=rel, alpha=0.8)]
    lc = LCRetriever(tree=tree, k=4, relation=rel, alpha=0.8).invoke("cat kitten")
    li = LIRetriever(tree, similarity_top_k=4, relation=rel, alpha=0.8).retrieve("cat kitten")
    assert [(d.metadata["tree_node_id"], d.metadata["tree_field"], d.metadata["relevance_score"]) for d in lc] == (
        expected
    )
    assert [(n.node.metadata["tree_node_id"], n.node.metadata["tree_field"], n.score) for n in li] == expected
    built = LCRetriever.from_texts(
        list(topic_docs().values()), chat_model=ScriptedChatModel(fake_reply), relation=rel, **_options()
    )
    assert built.relation == rel and len(built.invoke("cat kitten")) == 4
    with pytest.raises((TypeError, ValueError)):
        LIRetriever(tree, relation="context")
    with pytest.raises(ValueError):
        LIRetriever(tree, relation=rel, alpha=-0.5)
    with pytest.raises(ValueError):
        LCRetriever(tree=tree, relation=rel, alpha=-0.5)
