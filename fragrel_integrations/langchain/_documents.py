"""Conversions between LangChain ``Document`` objects and core fragments (no retrieval logic here)."""

from __future__ import annotations

from typing import Any

from langchain_core.documents import Document
from langchain_core.runnables import Runnable, RunnableLambda

from .._validation import check_type
from ..adapters import pools as pool
from ..adapters.wrapper_settings import score_metadata
from ..core.fragments import Fragment, ScoredFragment

__all__ = [
    "as_runnable",
    "check_documents",
    "fragment_to_document",
    "hit_document",
    "isolated_key",
    "with_scores",
]


def check_documents(documents: object, what: str) -> list[Document]:
    """``documents`` as a list of ``Document`` or a TypeError naming ``what`` produced it."""
    check_type(documents, list | tuple, f"{what} must be a list of langchain_core Document objects")
    for i, doc in enumerate(documents):
        check_type(doc, Document, f"{what}[{i}] must be a langchain_core Document")
    return list(documents)


def as_runnable(cls: type, value: Any) -> Any:
    """A pydantic "before" validator: a plain function ``query -> list[Document]`` as a ``RunnableLambda``, as LCEL
    pipes accept it."""
    if callable(value) and not isinstance(value, Runnable):
        return RunnableLambda(value)
    return value


def isolated_key(doc: Document) -> str:
    """A document id of its own for a Document without position metadata (its id, else a content hash)."""
    return pool.isolated_key(doc.id, doc.page_content, doc.metadata)


def with_scores(doc: Document, hit: ScoredFragment) -> Document:
    """A copy of ``doc`` (metadata copied too) with the three FragRel scores added."""
    return doc.model_copy(update={"metadata": {**doc.metadata, **score_metadata(hit)}})


def fragment_to_document(fragment: Fragment, *, doc_id_key: str, position_key: str) -> Document:
    """A Document holding a core fragment's text, metadata, ``doc_id`` and ``position``."""
    metadata = {**fragment.metadata, doc_id_key: fragment.doc_id, position_key: fragment.position}
    return Document(page_content=fragment.text, metadata=metadata)


def hit_document(hit: ScoredFragment, *, doc_id_key: str, position_key: str) -> Document:
    """A new Document for a core hit: :func:`fragment_to_document` with the three FragRel scores."""
    return with_scores(fragment_to_document(hit.fragment, doc_id_key=doc_id_key, position_key=position_key), hit)
