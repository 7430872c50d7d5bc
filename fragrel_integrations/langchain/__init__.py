"""LangChain components over the framework-free core: native retrievers, embeddings, a chat model, a Runnable,
middleware, stores and tools.

Needs the ``[langchain]`` extra (``langchain-core``, ``langchain``, ``langgraph``).

>>> from fragrel_integrations.langchain import FragRelRetriever, add_positions   # doctest: +SKIP
"""

from .._optional import require

require("langchain_core", "langchain")

from .chat_model import FragRelChatModel  # noqa: E402
from .embeddings import MiniLMEmbeddings  # noqa: E402
from .indexing import add_positions  # noqa: E402
from .inner_loop import InnerLoopRunnable  # noqa: E402
from .retriever import FragRelIndexRetriever, FragRelRetriever  # noqa: E402
from .scm_index import VectorStoreStreamIndex  # noqa: E402
from .scm_middleware import SCMMiddleware  # noqa: E402
from .scm_store import LangGraphStoreStream  # noqa: E402
from .surprise_tree import SurpriseTreeRetriever  # noqa: E402
from .triplet_store import TripletKVStore, TripletMemoryStore, make_memory_tools  # noqa: E402

__all__ = [
    "FragRelChatModel",
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
    "make_memory_tools",
]
