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
from pydantic import ConfigDict, Field, field_validator

from ..core.selection import check_k
from ..core.tree import FIELDS, BuildReport, SurpriseTree, TreeHit, TreeRelation
from ..models.base import optional_embedder
from ._documents import check_documents

__all__ = ["SurpriseTreeRetriever", "hit_to_document"]

_RETRIEVER_FIELDS = ("k", "budget_tokens", "mode", "fields", "width", "relation", "alpha")


def hit_to_document(hit: TreeHit) -> Document:
    """A Document for one retrieved tree text: node metadata plus ``tree_node_id``, ``tree_layer``,
    ``tree_field`` (text / summary / surprise), ``doc_id`` and ``position`` (leaves) and ``relevance_score``."""
    node = hit.node
    metadata: dict[str, Any] = {
        **node.metadata,
        "tree_node_id": node.id,
        "tree_layer": node.layer,
        "tree_field": hit.field,
        "relevance_score": hit.score,
    }
    if node.is_leaf:
        metadata["doc_id"], metadata["position"] = node.doc_id, node.position
    else:
        metadata["tree_children"] = list(node.children)
    return Document(page_content=hit.text, metadata=metadata, id=f"surprise-tree:{node.id}:{hit.field}")


def _split_kwargs(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    own = {k: kwargs.pop(k) for k in list(kwargs) if k in _RETRIEVER_FIELDS}
    return own, kwargs


def _documents_to_texts(
    documents: Sequence[Document], source_key: str | None
) -> tuple[list[str], list[str | None] | None, list[dict[str, Any]]]:
    docs = check_documents(list(documents), "documents")
    ids: list[str | None] = []
    for d in docs:
        value = d.metadata.get(source_key) if source_key else None
        ids.append(str(value) if value is not None else d.id)
    usable = all(v is not None for v in ids) and len(set(ids)) == len(ids)
    return [d.page_content for d in docs], ids if usable else None, [dict(d.metadata) for d in docs]


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
    k: int | None = Field(default=4, gt=0)
    budget_tokens: int | None = Field(default=None, gt=0)
    """Also stop when the returned texts reach this many tokens."""
    mode: Literal["collapsed", "traversal"] = "collapsed"
    fields: tuple[str, ...] = FIELDS
    """Which node texts may be returned: any of ``text``, ``summary``, ``surprise``."""
    width: int = Field(default=3, gt=0)
    """Nodes kept per level in traversal mode."""
    relation: TreeRelation | None = None
    """FragRel over the tree (``TreeRelation()``: texts related by node, parent/child and chunk position)."""
    alpha: float = Field(default=0.5, ge=0)
    """Weight of the relation's environment score (FragRel default 0.5)."""

    @field_validator("fields")
    @classmethod
    def _check_fields(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value or not set(value) <= set(FIELDS):
            raise ValueError(f"fields must be a non-empty subset of {FIELDS}, got {value!r}")
        return value

    @classmethod
    def from_texts(
        cls,
        texts: Sequence[str],
        *,
        chat_model: Any = None,
        embedder: Any = None,
        doc_ids: Sequence[str] | None = None,
        metadatas: Sequence[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> SurpriseTreeRetriever:
        """Build a tree over ``texts`` and wrap it. ``chat_model`` may be a LangChain chat model (None = no model:
        extractive summaries and surprise notes); ``embedder`` a LangChain Embeddings (None = the embedded MiniLM).
        Retriever fields (``k``, ``mode``, ...) are picked out of ``kwargs``; the rest go to :class:`SurpriseTree`
        (``summariser="extractive"`` or ``"llm"``, ``chunk_tokens``, ``seed``, ``show_progress``, ...)."""
        own, tree_kwargs = _split_kwargs(dict(kwargs))
        tree = SurpriseTree(chat_model, optional_embedder(embedder), **tree_kwargs)
        tree.build(texts, doc_ids=doc_ids, metadatas=metadatas)
        return cls(tree=tree, **own)

    @classmethod
    async def afrom_texts(
        cls,
        texts: Sequence[str],
        *,
        chat_model: Any = None,
        embedder: Any = None,
        doc_ids: Sequence[str] | None = None,
        metadatas: Sequence[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> SurpriseTreeRetriever:
        """Async :meth:`from_texts` (summary calls via ``ainvoke`` with bounded concurrency)."""
        own, tree_kwargs = _split_kwargs(dict(kwargs))
        tree = SurpriseTree(chat_model, optional_embedder(embedder), **tree_kwargs)
        await tree.abuild(texts, doc_ids=doc_ids, metadatas=metadatas)
        return cls(tree=tree, **own)

    @classmethod
    def from_documents(
        cls, documents: Sequence[Document], *, chat_model: Any = None, source_key: str | None = "source", **kwargs: Any
    ) -> SurpriseTreeRetriever:
        """Like :meth:`from_texts` for Documents: one tree document each, metadata copied to its chunks; the
        document ids come from ``metadata[source_key]`` or ``Document.id`` when all are present and distinct."""
        texts, ids, metas = _documents_to_texts(documents, source_key)
        return cls.from_texts(texts, chat_model=chat_model, doc_ids=ids, metadatas=metas, **kwargs)

    @classmethod
    async def afrom_documents(
        cls, documents: Sequence[Document], *, chat_model: Any = None, source_key: str | None = "source", **kwargs: Any
    ) -> SurpriseTreeRetriever:
        """Async :meth:`from_documents`."""
        texts, ids, metas = _documents_to_texts(documents, source_key)
        return await cls.afrom_texts(texts, chat_model=chat_model, doc_ids=ids, metadatas=metas, **kwargs)

    def add_documents(self, documents: Sequence[Document]) -> BuildReport:
        """Insert Documents into the tree (only the branches they join are re-summarised)."""
        docs = check_documents(list(documents), "documents")
        return self.tree.insert([d.page_content for d in docs], metadatas=[dict(d.metadata) for d in docs])

    async def aadd_documents(self, documents: Sequence[Document]) -> BuildReport:
        """Async :meth:`add_documents`."""
        docs = check_documents(list(documents), "documents")
        return await self.tree.ainsert([d.page_content for d in docs], metadatas=[dict(d.metadata) for d in docs])

    def _search(self, query: str, k: int | None) -> list[Document]:
        hits = self.tree.retrieve(
            query,
            k=self.k if k is None else check_k(k),
            budget_tokens=self.budget_tokens,
            mode=self.mode,
            fields=self.fields,
            width=self.width,
            relation=self.relation,
            alpha=self.alpha,
        )
        return [hit_to_document(h) for h in hits]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        return self._search(query, k)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        return await run_in_executor(None, self._search, query, k)
