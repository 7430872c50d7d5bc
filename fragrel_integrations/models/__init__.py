"""Models: the :class:`Embedder` and :class:`ChatModel` protocols, :func:`as_embedder` / :func:`as_chat_model`, the
embedded defaults (:class:`MiniLMEmbedder`, :class:`TransformersChatModel`, :class:`LlamaCppChatModel`) and
OpenAI-compatible servers. Names are imported on first access: importing this loads no framework and no model.

>>> from fragrel_integrations.models import as_embedder, as_chat_model   # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .chat import ChatMessage, ChatModel, ChatModelBase, abatch, batch, complete
    from .convert import as_chat_model, as_embedder, optional_embedder
    from .embedder import CachedEmbedder, Embedder, embed_documents, embed_query
    from .framework_models import LangChainChatModel, LlamaIndexChatModel, LlamaIndexEmbedder
    from .llama_cpp_chat import LlamaCppChatModel
    from .local import MiniLMEmbedder, default_embedder
    from .openai_chat import OpenAIChatModel
    from .openai_embeddings import OpenAIEmbedder
    from .response_cache import CachedChatModel, ResponseCache
    from .structured import ReplyFormat
    from .transformers_chat import TransformersChatModel, default_chat_model

__all__ = [
    "CachedChatModel",
    "CachedEmbedder",
    "ChatMessage",
    "ChatModel",
    "ChatModelBase",
    "Embedder",
    "LangChainChatModel",
    "LlamaCppChatModel",
    "LlamaIndexChatModel",
    "LlamaIndexEmbedder",
    "MiniLMEmbedder",
    "OpenAIChatModel",
    "OpenAIEmbedder",
    "ReplyFormat",
    "ResponseCache",
    "TransformersChatModel",
    "abatch",
    "as_chat_model",
    "as_embedder",
    "batch",
    "complete",
    "default_chat_model",
    "default_embedder",
    "embed_documents",
    "embed_query",
    "optional_embedder",
]

_WHERE = {
    "CachedEmbedder": "embedder",
    "Embedder": "embedder",
    "as_embedder": "convert",
    "embed_documents": "embedder",
    "embed_query": "embedder",
    "optional_embedder": "convert",
    "ReplyFormat": "structured",
    "CachedChatModel": "response_cache",
    "ResponseCache": "response_cache",
    "ChatMessage": "chat",
    "ChatModel": "chat",
    "ChatModelBase": "chat",
    "abatch": "chat",
    "as_chat_model": "convert",
    "batch": "chat",
    "complete": "chat",
    "LangChainChatModel": "framework_models",
    "LlamaCppChatModel": "llama_cpp_chat",
    "TransformersChatModel": "transformers_chat",
    "default_chat_model": "transformers_chat",
    "LlamaIndexChatModel": "framework_models",
    "LlamaIndexEmbedder": "framework_models",
    "MiniLMEmbedder": "local",
    "default_embedder": "local",
    "OpenAIChatModel": "openai_chat",
    "OpenAIEmbedder": "openai_embeddings",
}


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals(), __all__)
