"""Conversions between LangChain ``Document`` objects and core fragments (no retrieval logic here)."""

from __future__ import annotations

import hashlib
import json
import numbers
from collections.abc import Mapping
from typing import Any

from langchain_core.documents import Document

from ..core.conventions import SCORE_KEYS, score_metadata  # the keys written on every returned Document
from ..core.types import Fragment, ScoredFragment, parse_position

__all__ = [
    "DEFAULT_SCORE_KEYS",
    "SCORE_KEYS",
    "check_documents",
    "fragment_to_document",
    "isolated_key",
    "read_location",
    "read_score",
    "with_scores",
]

#: Metadata keys the reranker tries, in order, for a base retriever's score when ``score_key`` is not set.
DEFAULT_SCORE_KEYS: tuple[str, ...] = ("relevance_score", "score")


def check_documents(documents: object, what: str) -> list[Document]:
    """``documents`` as a list of ``Document`` or a TypeError naming ``what`` produced it."""
    if not isinstance(documents, list | tuple):
        raise TypeError(f"{what} must be a list of langchain_core Document objects, got {type(documents).__name__}")
    for i, doc in enumerate(documents):
        if not isinstance(doc, Document):
            raise TypeError(f"{what}[{i}] must be a langchain_core Document, got {type(doc).__name__}")
    return list(documents)


def read_location(doc: Document, doc_id_key: str, position_key: str) -> tuple[str, int] | None:
    """``(doc_id, position)`` from the metadata, or None when either key is missing (or None)."""
    doc_id = doc.metadata.get(doc_id_key)
    position = doc.metadata.get(position_key)
    if doc_id is None or position is None:
        return None
    return str(doc_id), parse_position(position, f"metadata[{position_key!r}]")


def read_score(doc: Document, score_key: str | None) -> float | None:
    """The base retriever's score from the metadata (``score_key``, or the first of DEFAULT_SCORE_KEYS found)."""
    keys = DEFAULT_SCORE_KEYS if score_key is None else (score_key,)
    for key in keys:
        value = doc.metadata.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"metadata[{key!r}] must be a number (the base retriever's score), got {value!r}")
        return float(value)
    return None


def isolated_key(doc: Document) -> str:
    """A document id of its own for a Document without position metadata (its id, else a content hash)."""
    if doc.id is not None:
        return f"fragrel:isolated:id:{doc.id}"
    payload = json.dumps([doc.page_content, doc.metadata], sort_keys=True, default=repr)
    return "fragrel:isolated:sha1:" + hashlib.sha1(payload.encode("utf-8")).hexdigest()


def with_scores(doc: Document, hit: ScoredFragment) -> Document:
    """A copy of ``doc`` (metadata copied too) with the three FragRel scores added."""
    return doc.model_copy(update={"metadata": {**doc.metadata, **score_metadata(hit)}})


def fragment_to_document(
    fragment: Fragment, *, doc_id_key: str, position_key: str, extra: Mapping[str, Any] | None = None
) -> Document:
    """A Document holding a core fragment's text, metadata, ``doc_id`` and ``position``."""
    metadata = {**fragment.metadata, doc_id_key: fragment.doc_id, position_key: fragment.position, **(extra or {})}
    return Document(page_content=fragment.text, metadata=metadata)
