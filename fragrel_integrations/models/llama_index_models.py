"""LlamaIndex embedding models as a core :class:`~fragrel_integrations.models.base.Embedder`.

Nothing here imports LlamaIndex at module import: the adapter only calls the two public methods every
LlamaIndex ``BaseEmbedding`` has (``get_text_embedding_batch`` and ``get_query_embedding``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["LlamaIndexEmbedder", "is_llama_index_embedding"]


def is_llama_index_embedding(obj: object) -> bool:
    """True for an instance of ``llama_index.core.base.embeddings.base.BaseEmbedding`` (without importing it)."""
    return any(
        cls.__name__ == "BaseEmbedding" and cls.__module__.startswith("llama_index.core") for cls in type(obj).__mro__
    )


class LlamaIndexEmbedder:
    """Wrap a LlamaIndex ``BaseEmbedding`` so that the core can use it.

    ``embed_documents`` goes through ``get_text_embedding_batch`` (so the model's batching, callbacks and
    embedding cache apply) and ``embed_query`` through ``get_query_embedding`` (query instructions apply).

    >>> from llama_index.core.embeddings import MockEmbedding          # doctest: +SKIP
    >>> LlamaIndexEmbedder(MockEmbedding(embed_dim=8)).embed_documents(["a", "b"]).shape  # doctest: +SKIP
    (2, 8)
    """

    def __init__(self, embed_model: Any, *, show_progress: bool = False) -> None:
        if not is_llama_index_embedding(embed_model):
            raise TypeError(
                f"embed_model must be a llama_index BaseEmbedding, got {type(embed_model).__name__}; "
                "objects with embed_documents/embed_query can be passed to fragrel directly"
            )
        self.embed_model = embed_model
        self.show_progress = show_progress

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self.embed_model.get_text_embedding_batch(list(texts), show_progress=self.show_progress)
        return np.asarray(vectors, dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return np.asarray(self.embed_model.get_query_embedding(text), dtype=np.float32)

    def __repr__(self) -> str:
        return f"LlamaIndexEmbedder({type(self.embed_model).__name__}(model_name={self.embed_model.model_name!r}))"
