"""LangChain components over the framework-free core: native retrievers, embeddings, a chat model, a Runnable,
middleware, stores and tools.

Needs the ``[langchain]`` extra. The retrievers, embeddings, chat model and Runnable need only ``langchain-core``;
the agent middleware (:class:`SCMMiddleware`, needs ``langchain``) and the LangGraph stores
(:class:`TripletMemoryStore`, :class:`LangGraphStoreStream`, the memory tools, need ``langgraph``) are imported
on first access, so ``from fragrel_integrations.langchain import FragRelRetriever`` works with
``langchain-core`` alone.

>>> from fragrel_integrations.langchain import FragRelRetriever, add_positions   # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .._optional import require

require("langchain_core", "langchain")

from .answer import grounded_answer_runnable  # noqa: E402
from .chat_model import FragRelChatModel  # noqa: E402
from .compressor import FragRelCompressor, with_store_scores  # noqa: E402
from .embeddings import MiniLMEmbeddings  # noqa: E402
from .indexing import add_positions  # noqa: E402
from .inner_loop import InnerLoopRunnable  # noqa: E402
from .retriever import FragRelIndexRetriever, FragRelRetriever  # noqa: E402
from .scm_index import VectorStoreStreamIndex  # noqa: E402
from .surprise_tree import SurpriseTreeRetriever  # noqa: E402

if TYPE_CHECKING:
    from .scm_middleware import SCMMiddleware
    from .scm_store import LangGraphStoreStream
    from .triplet_store import TripletKVStore, TripletMemoryStore, make_memory_tools

# name -> (module, what it needs beyond langchain-core): imported on first access
_LAZY = {
    "SCMMiddleware": ("scm_middleware", "langchain"),
    "LangGraphStoreStream": ("scm_store", "langgraph"),
    "TripletKVStore": ("triplet_store", "langgraph"),
    "TripletMemoryStore": ("triplet_store", "langgraph"),
    "make_memory_tools": ("triplet_store", "langgraph"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, package = _LAZY[name]
    try:
        value = getattr(importlib.import_module(f".{module}", __name__), name)
    except ImportError as exc:
        raise ImportError(
            f"{name} needs {package!r}, which is not installed. Install it with: "
            "pip install 'fragrel-integrations[langchain]'"
        ) from exc
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "FragRelChatModel",
    "FragRelCompressor",
    "FragRelIndexRetriever",
    "FragRelRetriever",
    "InnerLoopRunnable",
    "LangGraphStoreStream",
    "MiniLMEmbeddings",
    "SCMMiddleware",
    "SurpriseTreeRetriever",
    "TripletKVStore",
    "TripletMemoryStore",
    "VectorStoreStreamIndex",
    "add_positions",
    "grounded_answer_runnable",
    "make_memory_tools",
    "with_store_scores",
]
