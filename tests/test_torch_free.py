"""The torch-free path: with ``torch``, ``sentence_transformers`` and ``transformers`` not importable (an install
of ``.[langchain]`` / ``.[llama-index]`` without ``[embed]``), the core, the LangChain retriever and the LlamaIndex
retriever work with the user's own embedding model, and the embedded MiniLM says which extra it needs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

_HIDE = """
import sys
class _NoTorch:  # as if torch, sentence-transformers and transformers were not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "sentence_transformers", "transformers", "openvino"):  # no [embed]
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, _NoTorch())
"""


def _run(code: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", _HIDE + textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.splitlines()


_TEXTS = ["Mary went to the kitchen.", "She picked up the football there.", "John went to the garden."]


def test_core_and_langchain_retriever_with_a_user_embedder_without_torch():
    lines = _run(
        f"""
        from langchain_core.documents import Document
        from langchain_core.embeddings import Embeddings
        from langchain_core.vectorstores import InMemoryVectorStore
        from fragrel_integrations import FragRelIndex
        from fragrel_integrations.langchain import FragRelRetriever, MiniLMEmbeddings, add_positions
        from fragrel_integrations.testing import HashingEmbedder

        class MyEmbeddings(Embeddings):  # the user's own LangChain embedding model
            def __init__(self):
                self.model = HashingEmbedder(dim=64)
            def embed_documents(self, texts):
                return self.model.embed_documents(texts).tolist()
            def embed_query(self, text):
                return self.model.embed_query(text).tolist()

        texts = {_TEXTS!r}
        index = FragRelIndex.from_fragments(texts, embedder=MyEmbeddings())
        print(index.retrieve("football", k=1)[0].fragment.text)
        docs = add_positions([Document(t, metadata={{"source": "story"}}) for t in texts])
        store = InMemoryVectorStore(MyEmbeddings())
        store.add_documents(docs)
        hits = FragRelRetriever(base_retriever=store.as_retriever(), k=2).invoke("football")
        print(hits[0].page_content, sorted(k for k in hits[0].metadata if k.startswith(("fragrel", "relevance"))))
        try:
            MiniLMEmbeddings().embed_query("x")
        except ImportError as exc:
            print(exc)
        print(sorted(m for m in ("torch", "sentence_transformers", "transformers") if m in sys.modules))
        """
    )
    assert lines[0] == "She picked up the football there."
    assert lines[1] == (
        "She picked up the football there. "
        "['fragrel_doc_id', 'fragrel_environment_score', 'fragrel_independent_score', 'fragrel_position', "
        "'relevance_score']"
    )
    assert "fragrel-integrations[embed]" in lines[2]
    assert lines[3] == "[]"


def test_llama_index_retriever_with_a_user_embedding_without_torch():
    lines = _run(
        f"""
        from llama_index.core import Document, VectorStoreIndex
        from llama_index.core.base.embeddings.base import BaseEmbedding
        from llama_index.core.node_parser import SentenceSplitter
        from fragrel_integrations.llama_index import FragRelRetriever, MiniLMEmbedding, PositionTagger
        from fragrel_integrations.testing import HashingEmbedder

        model = HashingEmbedder(dim=64)

        class MyEmbedding(BaseEmbedding):  # the user's own LlamaIndex embedding model
            def _get_query_embedding(self, query):
                return model.embed_query(query).tolist()
            def _get_text_embedding(self, text):
                return model.embed_query(text).tolist()
            async def _aget_query_embedding(self, query):
                return self._get_query_embedding(query)

        docs = [Document(text=t, metadata={{"source": "story"}}) for t in {_TEXTS!r}]
        index = VectorStoreIndex.from_documents(
            docs, transformations=[SentenceSplitter(), PositionTagger()], embed_model=MyEmbedding()
        )
        hits = FragRelRetriever(index.as_retriever(), similarity_top_k=2).retrieve("football")
        print(hits[0].node.get_content(), len(hits), "fragrel_environment_score" in hits[0].node.metadata)
        try:
            MiniLMEmbedding().get_query_embedding("x")
        except ImportError as exc:
            print(exc)
        print(sorted(m for m in ("torch", "sentence_transformers", "transformers") if m in sys.modules))
        """
    )
    assert lines[0] == "She picked up the football there. 2 True"
    assert "fragrel-integrations[embed]" in lines[1]
    assert lines[2] == "[]"
