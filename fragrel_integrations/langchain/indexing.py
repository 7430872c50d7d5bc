"""Prepare LangChain Documents for FragRel: write ``fragrel_doc_id`` and ``fragrel_position`` metadata (and fill a
FragmentStore)."""

from __future__ import annotations

from collections.abc import Iterable

from langchain_core.documents import Document

from .._validation import check_type
from ..adapters.wrapper_settings import DEFAULT_DOC_ID_KEY, DEFAULT_POSITION_KEY, check_keys, read_key
from ..core.fragments import Fragment
from ..core.store import FragmentStore
from ._documents import check_documents

__all__ = ["add_positions"]


def add_positions(
    documents: Iterable[Document],
    *,
    doc_id_key: str = DEFAULT_DOC_ID_KEY,
    position_key: str = DEFAULT_POSITION_KEY,
    source_key: str | None = "source",
    default_doc_id: str = "0",
    store: FragmentStore | None = None,
) -> list[Document]:
    """Copies of ``documents`` with ``fragrel_doc_id`` and ``fragrel_position`` metadata, the locations FragRel
    relates (``doc_id_key`` / ``position_key`` name other keys; FragRel still reads the old defaults ``doc_id`` /
    ``position`` on Documents tagged before).

    Give the chunks **in reading order** (e.g. the output of a LangChain text splitter). Each chunk's document id
    is its existing ``metadata[doc_id_key]``, else ``metadata[source_key]`` (the file a loader read), else
    ``default_doc_id``; its position is a running counter per document id, from 0. The input Documents are not
    changed. With ``store``, the chunks are also written to that :class:`FragmentStore` (one transaction; their
    metadata must be JSON-serialisable) so that ``FragRelRetriever(store=store, expand=1)`` can fetch the
    neighbours of a hit that the vector store did not return.

    Call it once over all chunks of a document: a second call restarts the positions at 0.

    >>> docs = add_positions([Document("Call me Ishmael."), Document("Some years ago...")])
    >>> [(d.metadata["fragrel_doc_id"], d.metadata["fragrel_position"]) for d in docs]
    [('0', 0), ('0', 1)]
    """
    if isinstance(documents, Document):
        raise TypeError("documents must be a list of Documents; wrap a single Document as [doc]")
    docs = check_documents(list(documents), "documents")
    check_keys(doc_id_key, position_key)
    if store is not None:
        check_type(store, FragmentStore, "store must be a fragrel_integrations FragmentStore")
    counters: dict[str, int] = {}
    out: list[Document] = []
    for doc in docs:
        doc_id = read_key(doc.metadata, doc_id_key)
        if doc_id is None and source_key is not None:
            doc_id = doc.metadata.get(source_key)
        doc_id = str(default_doc_id if doc_id is None else doc_id)
        position = counters.get(doc_id, 0)
        counters[doc_id] = position + 1
        out.append(doc.model_copy(update={"metadata": {**doc.metadata, doc_id_key: doc_id, position_key: position}}))
    if store is not None:
        store.add(Fragment(d.page_content, d.metadata[doc_id_key], d.metadata[position_key], d.metadata) for d in out)
    return out
