"""Any model as the core's protocols (:func:`as_embedder`, :func:`optional_embedder`, :func:`as_chat_model`); the
one module that knows the adapters, so no cycle runs between a protocol and them. No framework is imported here."""

from __future__ import annotations

from typing import Any

from .chat import ChatModel, is_instance_of
from .embedder import Embedder, EmbedderProvider
from .framework_models import LangChainChatModel, LlamaIndexChatModel, LlamaIndexEmbedder, is_llama_index_embedding

__all__ = ["as_chat_model", "as_embedder", "optional_embedder"]


def as_embedder(model: Any) -> Embedder:
    """``model`` as an :class:`Embedder`: a wrapper's core embedder, a LlamaIndex ``BaseEmbedding`` wrapped, or
    anything with ``embed_documents`` and ``embed_query`` as is; None raises (see :func:`optional_embedder`).

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
    """``model`` as a :class:`ChatModel`: LangChain and LlamaIndex models wrapped (detected first: LangChain's have
    ``invoke`` too), anything with ``invoke`` and ``ainvoke`` returning text as is."""
    lc = "langchain_core.language_models"
    if is_instance_of(model, lc, "BaseChatModel") or is_instance_of(model, lc, "BaseLLM"):
        return LangChainChatModel(model)
    if is_instance_of(model, "llama_index.core.llms", "LLM"):
        return LlamaIndexChatModel(model)
    if isinstance(model, ChatModel):
        return model
    raise TypeError(
        f"cannot use {type(model).__name__} as a chat model: pass a LangChain chat model, a LlamaIndex LLM, "
        "an OpenAIChatModel / LlamaCppChatModel, or any object with invoke(messages) and ainvoke(messages)"
    )
