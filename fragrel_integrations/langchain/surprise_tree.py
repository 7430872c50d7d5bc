"""The surprise tree as a native LangChain retriever (all tree logic lives in the core SurpriseTree).

>>> from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel
>>> llm = ScriptedChatModel(lambda m: "(Summary): Pets make noises.\\n(Surprise): None")
>>> retriever = SurpriseTreeRetriever.from_texts(
...     ["Cats purr softly. Dogs bark loudly."], chat_model=llm, embedder=HashingEmbedder(dim=64),
...     show_progress=False, k=2)
>>> docs = retriever.invoke("Do cats purr softly?")
>>> docs[0].metadata["tree_field"], docs[0].metadata["tree_layer"]
('text', 0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables.config import run_in_executor
from pydantic import ConfigDict, Field, ValidationInfo, field_validator

from ..adapters import tree_search as kit
from ..core.selection import check_k
from ..core.tree import FIELDS, BuildReport, SurpriseTree, TreeHit, TreeRelation
from ._documents import check_documents

__all__ = ["SurpriseTreeRetriever", "hit_to_document"]

_RETRIEVER_FIELDS = ("k", *kit.SEARCH_OPTIONS)
_DOCS = kit.SEARCH_DOCS


def hit_to_document(hit: TreeHit) -> Document:
    """A Document for one retrieved tree text, with :func:`~fragrel_integrations.adapters.tree_search.hit_metadata`:
    ``tree_node_id``, ``tree_layer``, ``tree_field`` (text / summary / surprise), ``doc_id`` and ``position``
    (leaves) and ``relevance_score``."""
    return Document(page_content=hit.text, metadata=kit.hit_metadata(hit), id=kit.hit_id(hit))


def _tree_inputs(documents: Sequence[Document], source_key: str | None) -> dict[str, Any]:
    docs = check_documents(list(documents), "documents")
    values = [d.metadata.get(source_key) if source_key else None for d in docs]
    ids = [str(value) if value is not None else d.id for d, value in zip(docs, values, strict=True)]
    return kit.tree_inputs([d.page_content for d in docs], ids, [dict(d.metadata) for d in docs])


class SurpriseTreeRetriever(BaseRetriever):
    """Retrieve from a :class:`~fragrel_integrations.core.tree.SurpriseTree` (RAPTOR tree with surprise facts).

    Collapsed-tree retrieval by default: every leaf chunk, summary and surprise note competes; ``mode="traversal"``
    walks down from the roots instead. ``k`` (also an invoke kwarg) and ``budget_tokens`` bound the result.
    Build with :meth:`from_texts` / :meth:`from_documents` (or their async forms), or pass a tree you have.
    Each Document carries ``tree_node_id``, ``tree_layer``, ``tree_field`` and ``relevance_score`` metadata.
    Works inside a running event loop: building uses threads, ``ainvoke`` runs the search in an executor.
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    tree: SurpriseTree
    """The core tree (holds the nodes, the embedder and, for inserts, the chat model)."""
    k: int | None = 4
    budget_tokens: int | None = Field(None, description=_DOCS["budget_tokens"])
    mode: Literal["collapsed", "traversal"] = Field("collapsed", description=_DOCS["mode"])
    fields: tuple[str, ...] = Field(FIELDS, description=_DOCS["fields"])
    width: int = Field(3, description=_DOCS["width"])
    relation: TreeRelation | None = Field(None, description=_DOCS["relation"])
    alpha: float = Field(0.5, description=_DOCS["alpha"])

    @field_validator(*kit.SEARCH_OPTIONS, "k", mode="before")
    @classmethod
    def _check_setting(cls, value: Any, info: ValidationInfo) -> Any:
        return kit.SEARCH_CHECKS[info.field_name](value)  # the kit's check: the same words as in LlamaIndex

    @classmethod
    def from_texts(cls, texts: Sequence[str], **kwargs: Any) -> SurpriseTreeRetriever:
        """Build a tree over ``texts`` and wrap it. Keywords: ``chat_model`` (a LangChain chat model; None = no
        model: extractive summaries and surprise notes), ``embedder`` (a LangChain Embeddings; None = the embedded
        MiniLM), ``doc_ids``, ``metadatas``, retriever fields (``k``, ``mode``, ...) and :class:`SurpriseTree`
        keywords (``summariser="extractive"`` or ``"llm"``, ``chunk_tokens``, ``seed``, ``show_progress``, ...)."""
        tree, own = kit.build_tree(texts, kwargs, _RETRIEVER_FIELDS)
        return cls(tree=tree, **own)

    @classmethod
    async def afrom_texts(cls, texts: Sequence[str], **kwargs: Any) -> SurpriseTreeRetriever:
        """Async :meth:`from_texts` (summary calls via ``ainvoke`` with bounded concurrency)."""
        tree, own = await kit.abuild_tree(texts, kwargs, _RETRIEVER_FIELDS)
        return cls(tree=tree, **own)

    @classmethod
    def from_documents(
        cls, documents: Sequence[Document], *, chat_model: Any = None, source_key: str | None = "source", **kwargs: Any
    ) -> SurpriseTreeRetriever:
        """Like :meth:`from_texts` for Documents: one tree document each, metadata copied to its chunks; the
        document ids come from ``metadata[source_key]`` or ``Document.id`` when all are present and distinct."""
        return cls.from_texts(chat_model=chat_model, **_tree_inputs(documents, source_key), **kwargs)

    @classmethod
    async def afrom_documents(
        cls, documents: Sequence[Document], *, chat_model: Any = None, source_key: str | None = "source", **kwargs: Any
    ) -> SurpriseTreeRetriever:
        """Async :meth:`from_documents`."""
        return await cls.afrom_texts(chat_model=chat_model, **_tree_inputs(documents, source_key), **kwargs)

    def add_documents(self, documents: Sequence[Document]) -> BuildReport:
        """Insert Documents into the tree (only the branches they join are re-summarised)."""
        docs = check_documents(list(documents), "documents")
        return self.tree.insert([d.page_content for d in docs], metadatas=[dict(d.metadata) for d in docs])

    async def aadd_documents(self, documents: Sequence[Document]) -> BuildReport:
        """Async :meth:`add_documents`."""
        docs = check_documents(list(documents), "documents")
        return await self.tree.ainsert([d.page_content for d in docs], metadatas=[dict(d.metadata) for d in docs])

    def _search(self, query: str, k: int | None) -> list[Document]:
        hits = kit.search(self.tree, query, self.k if k is None else check_k(k), self)
        return [hit_to_document(h) for h in hits]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        return self._search(query, k)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        return await run_in_executor(None, self._search, query, k)
