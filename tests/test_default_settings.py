"""No component warns about its own default configuration (issue 24): each one is built with its defaults, on
the embedded defaults (all-MiniLM-L6-v2, SmolLM2-135M), with every Python warning turned into an error (except the
import-time and deprecation notices of dependencies) and the library's logged warnings captured. A default that
triggers its own warning (``SurpriseTree()`` with 600-token chunks for an embedder that reads 256) fails here."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

import pytest

BOOK = " ".join(
    f"Chapter {i}. The sailor walked along the shore of the island and counted the goats on the hill. "
    "He wrote the day in his journal, mended the fence and carried water from the spring to the cave."
    for i in range(40)
)


@pytest.fixture(scope="module")
def llm():
    from fragrel_integrations.models.transformers_chat import default_chat_model

    return default_chat_model()


def no_self_warnings(build: Callable[[], Any], caplog: pytest.LogCaptureFixture) -> Any:
    """Run ``build`` with warnings as errors; fail on any WARNING the library logs."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fragrel_integrations"), warnings.catch_warnings():
        warnings.simplefilter("error")
        for category in (ImportWarning, DeprecationWarning, PendingDeprecationWarning):  # a dependency's notices
            warnings.filterwarnings("ignore", category=category)
        warnings.filterwarnings("error", module="fragrel_integrations")
        made = build()
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("fragrel_integrations")]
    assert not logged, logged
    return made


def test_the_check_sees_logged_and_raised_warnings(caplog):
    """The harness itself catches both kinds, so a pass below means something."""
    with pytest.raises(UserWarning):
        no_self_warnings(lambda: warnings.warn("w", UserWarning, stacklevel=1), caplog)
    with pytest.raises(AssertionError, match="logged"):
        no_self_warnings(lambda: logging.getLogger("fragrel_integrations.x").warning("logged"), caplog)


@pytest.mark.slow
def test_core_components_with_defaults(caplog, llm, tmp_path):
    pytest.importorskip("sklearn")
    from fragrel_integrations import FragRelIndex
    from fragrel_integrations.core.inner_loop import InnerLoopEngine
    from fragrel_integrations.core.scm import SelfControlledMemory
    from fragrel_integrations.core.tree import SurpriseTree
    from fragrel_integrations.core.triplets import TripletStore
    from fragrel_integrations.core.windows import embedder_window_tokens

    index = no_self_warnings(lambda: FragRelIndex.from_texts([BOOK]), caplog)
    no_self_warnings(lambda: index.retrieve("Where did the sailor get water?"), caplog)
    tree = no_self_warnings(SurpriseTree, caplog)  # was: "chunk_tokens=600 but the embedder reads only 256"
    window = embedder_window_tokens(tree.embedder)
    assert window == 256 and tree.config.chunk_tokens <= window  # the chunks fit what the embedder reads
    no_self_warnings(lambda: tree.build([BOOK]), caplog)
    assert max(tree.count(n.text) for n in tree.leaves()) <= tree.config.chunk_tokens
    no_self_warnings(lambda: SurpriseTree(llm), caplog)
    no_self_warnings(lambda: InnerLoopEngine(index, llm), caplog)
    no_self_warnings(TripletStore, caplog).close()
    no_self_warnings(lambda: TripletStore(tmp_path / "memory.db"), caplog).close()
    no_self_warnings(lambda: SelfControlledMemory(llm), caplog)


@pytest.mark.slow
def test_langchain_components_with_defaults(caplog, llm, tmp_path):
    pytest.importorskip("langchain")
    pytest.importorskip("sklearn")
    from langchain_core.vectorstores import InMemoryVectorStore

    from fragrel_integrations.core.tree import SurpriseTree
    from fragrel_integrations.langchain import (
        FragRelChatModel,
        FragRelIndexRetriever,
        FragRelRetriever,
        InnerLoopRunnable,
        MiniLMEmbeddings,
        SCMMiddleware,
        SurpriseTreeRetriever,
        TripletMemoryStore,
    )

    embeddings = no_self_warnings(MiniLMEmbeddings, caplog)
    vectorstore = InMemoryVectorStore(embeddings)
    retriever = no_self_warnings(lambda: FragRelRetriever(base_retriever=vectorstore.as_retriever()), caplog)
    no_self_warnings(lambda: FragRelIndexRetriever.from_texts([BOOK]), caplog)
    no_self_warnings(lambda: SurpriseTreeRetriever(tree=SurpriseTree()), caplog)
    no_self_warnings(lambda: SurpriseTreeRetriever.from_texts([BOOK[:2000]]), caplog)
    model = no_self_warnings(lambda: FragRelChatModel(model=llm), caplog)
    no_self_warnings(lambda: InnerLoopRunnable(retriever=retriever, model=model), caplog)
    no_self_warnings(lambda: SCMMiddleware(model=model, path=str(tmp_path / "chat.db")), caplog)
    no_self_warnings(TripletMemoryStore, caplog).core.close()


@pytest.mark.slow
def test_llama_index_components_with_defaults(caplog, llm, tmp_path):
    pytest.importorskip("llama_index.core")
    pytest.importorskip("sklearn")
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.node_parser import SentenceSplitter

    from fragrel_integrations.core.tree import SurpriseTree
    from fragrel_integrations.llama_index import (
        FragRelIndexRetriever,
        FragRelLLM,
        FragRelPostprocessor,
        FragRelRetriever,
        InnerLoopQueryEngine,
        MiniLMEmbedding,
        PositionTagger,
        SCMMemory,
        SurpriseExtractor,
        SurpriseTreeRetriever,
        TripletGraphStore,
    )

    embed_model = no_self_warnings(MiniLMEmbedding, caplog)
    index = VectorStoreIndex.from_documents(
        [Document(text=BOOK[:3000])], transformations=[SentenceSplitter(), PositionTagger()], embed_model=embed_model
    )
    no_self_warnings(PositionTagger, caplog)
    no_self_warnings(FragRelPostprocessor, caplog)
    retriever = no_self_warnings(lambda: FragRelRetriever(index.as_retriever()), caplog)
    no_self_warnings(lambda: FragRelIndexRetriever.from_texts([BOOK]), caplog)
    no_self_warnings(lambda: SurpriseTreeRetriever(SurpriseTree()), caplog)
    no_self_warnings(SurpriseExtractor, caplog)
    llm_wrapper = no_self_warnings(lambda: FragRelLLM(model=llm), caplog)
    no_self_warnings(lambda: InnerLoopQueryEngine(retriever, llm_wrapper), caplog)
    no_self_warnings(lambda: SCMMemory(llm=llm_wrapper, path=str(tmp_path / "chat.db"), session_id="ana"), caplog)
    no_self_warnings(TripletGraphStore, caplog).core.close()
