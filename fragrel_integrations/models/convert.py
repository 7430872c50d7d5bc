"""Conversions of any model into the core's protocols: :func:`as_embedder`, :func:`optional_embedder` and
:func:`as_chat_model`.

The protocol modules (:mod:`.embedder`, :mod:`.chat`) know none of their adapters; this module knows them all, so
that no import cycle runs between a protocol and its adapters. No framework is imported here: a framework
object is recognised only when its framework is already imported (an instance of it implies it is).
"""

from __future__ import annotations

from typing import Any

from .chat import ChatModel, is_instance_of
from .embedder import Embedder, EmbedderProvider
from .framework_models import LangChainChatModel, LlamaIndexChatModel, LlamaIndexEmbedder, is_llama_index_embedding

__all__ = ["as_chat_model", "as_embedder", "optional_embedder"]


def as_embedder(model: Any) -> Embedder:
    """Return ``model`` as an :class:`Embedder`, the one conversion every component and adapter uses.

    - an :class:`~fragrel_integrations.models.embedder.EmbedderProvider` (this package's wrappers, LangChain
      ``MiniLMEmbeddings`` and LlamaIndex ``MiniLMEmbedding``) gives the core embedder it holds
      (``fragrel_embedder()``: loaded on first use, shared with the rest of the library);
    - a LlamaIndex ``BaseEmbedding`` is wrapped in
      :class:`~fragrel_integrations.models.framework_models.LlamaIndexEmbedder`;
    - anything with ``embed_documents(texts)`` and ``embed_query(text)`` (a LangChain ``Embeddings``, a core
      embedder, your own object) is returned as is.

    No framework is imported here. ``None`` raises: components take ``embedder=None`` for the embedded
    default (see :func:`optional_embedder`).

    >>> from fragrel_integrations.testing import HashingEmbedder
    >>> emb = HashingEmbedder(dim=8)
    >>> as_embedder(emb) is emb
    True
    """
    if isinstance(model, EmbedderProvider):
        return model.fragrel_embedder()
    if is_llama_index_embedding(model):
        return LlamaIndexEmbedder(model)
    if isinstance(model, Embedder):
        return model
    if model is None:
        raise TypeError("embedder is None: pass an embedding model, or leave embedder=None where a component takes it")
    raise TypeError(
        f"cannot use {type(model).__name__} as an embedder: pass a LangChain Embeddings, a LlamaIndex "
        "BaseEmbedding, MiniLMEmbeddings()/MiniLMEmbedding(), or any object with embed_documents(texts) and "
        "embed_query(text)"
    )


def optional_embedder(model: Any) -> Embedder | None:
    """:func:`as_embedder`, except that ``None`` stays ``None`` (a component's embedded default)."""
    return None if model is None else as_embedder(model)


def as_chat_model(model: Any) -> ChatModel:
    """Return ``model`` as a :class:`ChatModel`: LangChain ``BaseChatModel`` and LlamaIndex ``LLM`` objects are
    wrapped; anything that already has ``invoke`` and ``ainvoke`` returning text is returned as is.

    LangChain chat models also have ``invoke``/``ainvoke`` (returning messages), so they are detected first.
    """
    if is_instance_of(model, "langchain_core.language_models", "BaseChatModel"):
        return LangChainChatModel(model)
    if is_instance_of(model, "langchain_core.language_models", "BaseLLM"):
        return LangChainChatModel(model)
    if is_instance_of(model, "llama_index.core.llms", "LLM"):
        return LlamaIndexChatModel(model)
    if isinstance(model, ChatModel):
        return model
    raise TypeError(
        f"cannot use {type(model).__name__} as a chat model: pass a LangChain chat model, a LlamaIndex LLM, "
        "an OpenAIChatModel / LlamaCppChatModel, or any object with invoke(messages) and ainvoke(messages)"
    )
