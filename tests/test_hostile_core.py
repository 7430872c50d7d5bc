"""Hostile inputs to the FragRel core and its two adapters: huge positions, clashing locations, token-free text."""

import pytest
from langchain_core.documents import Document
from llama_index.core.schema import NodeWithScore, TextNode

from fragrel_integrations import ContextRelation, Fragment, FragRelIndex, rerank
from fragrel_integrations.core.fragments import MAX_POSITION, parse_position
from fragrel_integrations.core.scorers import BM25Scorer
from fragrel_integrations.langchain import FragRelRetriever
from fragrel_integrations.llama_index import FragRelPostprocessor


@pytest.mark.parametrize("bad", [1e30, 2**70, "12345678901234567890", "9" * 5000, -(2**63), 2**63 - 1])
def test_out_of_range_positions_are_a_clear_value_error(bad):
    with pytest.raises(ValueError, match=r"\[-2\*\*53, 2\*\*53\]"):
        parse_position(bad)


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), True, "3.5", 2.5, None, [1]])
def test_non_positions_are_a_type_error(bad):
    with pytest.raises(TypeError, match="int position"):
        parse_position(bad)


def test_positions_at_the_edge_of_the_range_retrieve():
    frags = [Fragment("a cat", "d", -MAX_POSITION), Fragment("a dog", "d", MAX_POSITION), Fragment("cat", "e", 0)]
    hits = FragRelIndex(frags, scorer="bm25", show_progress=False).retrieve("cat", k=3)
    assert {h.fragment.position for h in hits} == {-MAX_POSITION, MAX_POSITION, 0}
    with pytest.raises(ValueError, match="2\\*\\*53"):
        Fragment("x", "d", MAX_POSITION + 1)


def test_langchain_document_with_a_huge_position_names_the_fix():
    docs = [Document("cat", metadata={"doc_id": "d", "position": 1e30, "score": 1.0})]
    retriever = FragRelRetriever(base_retriever=lambda q: docs, k=1)
    with pytest.raises(ValueError, match="metadata\\['position'\\]"):
        retriever.invoke("cat")


def test_llama_index_node_with_a_huge_position_names_the_fix():
    node = NodeWithScore(node=TextNode(text="cat", metadata={"doc_id": "d", "position": "1" * 20}), score=1.0)
    with pytest.raises(ValueError, match="PositionTagger"):
        FragRelPostprocessor(top_n=1).postprocess_nodes([node], query_str="cat")


def test_two_different_texts_at_one_location_are_not_silently_merged():
    cands = [Fragment("first text", "d", 0), Fragment("other text", "d", 0)]
    with pytest.raises(ValueError, match="add_positions"):
        rerank("q", cands, relation=ContextRelation(), k=2, scores=[1.0, 0.5])
    same = [Fragment("same", "d", 0), Fragment("same", "d", 0)]
    assert len(rerank("q", same, relation=ContextRelation(), k=2, scores=[1.0, 1.0])) == 1


@pytest.mark.parametrize("texts", [["!!!", "???"], ["\x00" * 100], ["", " "]])
def test_bm25_over_a_corpus_without_word_tokens_scores_zero(texts):
    assert BM25Scorer(texts)("anything").tolist() == [0.0] * len(texts)


def test_hybrid_index_over_punctuation_only_text_retrieves(bow_embedder):
    index = FragRelIndex.from_fragments(["!!!", "???"], scorer="bm25", show_progress=False)
    assert len(index.retrieve("what?", k=2)) == 2


def test_cli_refuses_a_fifo_and_an_unreadable_file(tmp_path, monkeypatch):
    import os
    from pathlib import Path

    from fragrel_integrations.cli import main

    fifo = tmp_path / "book.txt"
    os.mkfifo(fifo)
    with pytest.raises(SystemExit, match="not a regular file"):
        main(["retrieve", str(fifo), "who?", "--quiet"])
    plain = tmp_path / "plain.txt"
    plain.write_text("some words")

    def denied(self):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(SystemExit, match="cannot read it: Permission denied"):
        main(["retrieve", str(plain), "who?", "--quiet"])


# ------------------------------------------------------------------------------------------ saved trees (issue 25)
def test_a_saved_tree_refuses_another_embedder_of_the_same_class_and_dimension(tmp_path, caplog):
    import logging

    from fragrel_integrations.core.tree import SurpriseTree, load_tree, save_tree
    from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel

    llm = ScriptedChatModel(lambda m: "(Summary): s\n(Surprise): t")
    tree = SurpriseTree(llm, HashingEmbedder(dim=32), show_progress=False)
    tree.build(["Cats purr. Dogs bark.", "Stocks fell. Bonds rose."])
    path = tmp_path / "tree.sqlite"
    save_tree(tree, path)
    assert load_tree(path, embedder=HashingEmbedder(dim=32)).to_state() == tree.to_state()
    with pytest.raises(ValueError, match=r"tree\.sqlite was .*fingerprint.*pass the embedder it was built with"):
        load_tree(path, embedder=HashingEmbedder(dim=32, seed=3))
    with pytest.raises(ValueError, match="fingerprint"):
        SurpriseTree.from_state(tree.to_state(), embedder=HashingEmbedder(dim=32, seed=3))
    state = tree.to_state()  # a state recorded before the identity was: it loads, with a warning
    del state["embedder"]
    with caplog.at_level(logging.WARNING, logger="fragrel_integrations.core.tree.summary_tree"):
        assert len(SurpriseTree.from_state(state, embedder=HashingEmbedder(dim=32)).leaves()) == 2
    assert "does not record the embedder" in caplog.text


# ------------------------------------------------------------------------------------------ round 4 (issue 36)

BAD_QUERIES = {"empty": ("", "empty"), "blank": (" \n\t", "blank"), "surrogate": ("who\ud800?", "position 3")}


def _wrappers():
    """Every retrieving wrapper of both frameworks, as ``name -> (sync call, async call)`` taking the query."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from llama_index.core.retrievers import BaseRetriever as LIBase
    from test_tree_core import fake_reply

    from fragrel_integrations.core.triplets import Triplet, TripletStore
    from fragrel_integrations.langchain import InnerLoopRunnable
    from fragrel_integrations.langchain import SurpriseTreeRetriever as LCTree
    from fragrel_integrations.llama_index import FragRelRetriever as LIFragRel
    from fragrel_integrations.llama_index import InnerLoopQueryEngine
    from fragrel_integrations.llama_index import SurpriseTreeRetriever as LITree
    from fragrel_integrations.llama_index.triplet_graph_store import TripletMemoryRetriever
    from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel

    emb = HashingEmbedder(dim=64)
    docs = [Document(t, metadata={"doc_id": "d", "position": i}) for i, t in enumerate(["a cat sat", "a dog ran"])]
    nodes = [NodeWithScore(node=TextNode(text=d.page_content, metadata=d.metadata), score=1.0) for d in docs]
    calls = []

    class LIList(LIBase):
        def _retrieve(self, query_bundle):
            calls.append(query_bundle.query_str)
            return nodes

    def lc_base(q):
        calls.append(q)
        return docs

    lc = FragRelRetriever(base_retriever=lc_base, embedder=emb)
    li = LIFragRel(LIList(), embedder=emb)
    post = FragRelPostprocessor(embedder=emb)
    tree_options = {"embedder": emb, "show_progress": False}
    lc_tree = LCTree.from_texts(["Cats purr.", "Dogs bark."], chat_model=ScriptedChatModel(fake_reply), **tree_options)
    li_tree = LITree.from_texts(["Cats purr.", "Dogs bark."], chat_model=ScriptedChatModel(fake_reply), **tree_options)
    store = TripletStore(embedder=emb)
    store.write(Triplet("Ann", "lives in", "Paris"))
    triplets = TripletMemoryRetriever(store)
    loop = InnerLoopRunnable(retriever=lc_base, model=FakeListChatModel(responses=["x"]))
    engine = InnerLoopQueryEngine(retriever=LIList(), llm=ScriptedChatModel(["x"], cycle=True))
    return calls, {
        "lc FragRelRetriever": (lc.invoke, lc.ainvoke),
        "li FragRelRetriever": (li.retrieve, li.aretrieve),
        "li FragRelPostprocessor": (lambda q: post.postprocess_nodes(nodes, query_str=q), None),
        "lc SurpriseTreeRetriever": (lc_tree.invoke, lc_tree.ainvoke),
        "li SurpriseTreeRetriever": (li_tree.retrieve, li_tree.aretrieve),
        "li TripletMemoryRetriever": (triplets.retrieve, triplets.aretrieve),
        "lc InnerLoopRunnable": (loop.invoke, loop.ainvoke),
        "li InnerLoopQueryEngine": (engine.query, engine.aquery),
    }


@pytest.mark.parametrize("bad", list(BAD_QUERIES), ids=list(BAD_QUERIES))
async def test_every_wrapper_refuses_an_empty_blank_or_unencodable_query_before_its_base(bad):
    query, words = BAD_QUERIES[bad]
    calls, wrappers = _wrappers()
    for name, (sync, asynchronous) in wrappers.items():
        with pytest.raises(ValueError, match=words):
            sync(query)
        if asynchronous is not None:
            with pytest.raises(ValueError, match=words):
                await asynchronous(query)
        assert calls == [], name  # the base never saw it
    assert wrappers["lc FragRelRetriever"][0]("cat") and calls == ["cat"]  # a real query still works


def test_a_lone_surrogate_is_refused_by_the_index_and_the_embedder_helpers():
    from fragrel_integrations.core.windows import embed_windows
    from fragrel_integrations.models.embedder import embed_documents, embed_query
    from fragrel_integrations.testing import HashingEmbedder

    emb = HashingEmbedder(dim=16)
    with pytest.raises(ValueError, match=r"texts\[1\] contains '\\ud800' at position 2"):
        embed_documents(emb, ["fine", "ab\ud800"])
    with pytest.raises(ValueError, match=r"texts\[1\] contains '\\ud800' at position 2"):
        embed_windows(emb, ["fine", "ab\ud800"], window_words=2)
    with pytest.raises(ValueError, match="the query contains '\\\\ud800' at position 0"):
        embed_query(emb, "\ud800")
    with pytest.raises(ValueError, match=r"fragments\[1\].text contains '\\udc80' at position 1"):
        FragRelIndex.from_fragments(["a cat", "a\udc80dog"], scorer="bm25")
    index = FragRelIndex.from_fragments(["a cat", "a dog"], scorer="bm25")
    with pytest.raises(ValueError, match="the query contains '\\\\udc80' at position 4"):
        index.retrieve("cat \udc80")
    assert index.retrieve("cat", k=1)[0].fragment.text == "a cat"
