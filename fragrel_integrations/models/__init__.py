"""Models: the :class:`Embedder` and :class:`ChatModel` protocols, :func:`as_embedder` / :func:`as_chat_model`, the
embedded defaults (:class:`MiniLMEmbedder`, :class:`TransformersChatModel`, :class:`LlamaCppChatModel`) and
OpenAI-compatible servers. Names are imported on first access: importing this loads no framework and no model.

>>> from fragrel_integrations.models import as_chat_model, as_embedder
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

_MODULES = {
    "chat": ("ChatMessage", "ChatModel", "ChatModelBase", "abatch", "batch", "complete"),
    "convert": ("as_chat_model", "as_embedder", "optional_embedder"),
    "embedder": ("CachedEmbedder", "Embedder", "embed_documents", "embed_query"),
    "framework_models": ("LangChainChatModel", "LlamaIndexChatModel", "LlamaIndexEmbedder"),
    "llama_cpp_chat": ("LlamaCppChatModel",),
    "local": ("MiniLMEmbedder", "default_embedder"),
    "openai_chat": ("OpenAIChatModel",),
    "openai_embeddings": ("OpenAIEmbedder",),
    "response_cache": ("CachedChatModel", "ResponseCache"),
    "structured": ("ReplyFormat",),
    "transformers_chat": ("TransformersChatModel", "default_chat_model"),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals(), __all__)
