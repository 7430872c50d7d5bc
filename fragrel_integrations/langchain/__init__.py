"""LangChain components: native retrievers, embeddings, a Runnable, stores and tools over the framework-free core.

Needs the ``[langchain]`` extra (``langchain-core``, ``langchain``, ``langgraph``).

>>> from fragrel_integrations.langchain import FragRelRetriever, add_positions   # doctest: +SKIP
"""

from .._optional import require

require("langchain_core", "langchain")

from .embeddings import MiniLMEmbeddings  # noqa: E402
from .indexing import add_positions  # noqa: E402
from .inner_loop import InnerLoopRunnable  # noqa: E402
from .retriever import FragRelIndexRetriever, FragRelRetriever  # noqa: E402
from .scm_middleware import SCMMiddleware  # noqa: E402
from .surprise_tree import SurpriseTreeRetriever  # noqa: E402
from .triplet_store import TripletKVStore, TripletMemoryStore, make_memory_tools  # noqa: E402

__all__ = [
    "FragRelIndexRetriever",
    "FragRelRetriever",
    "InnerLoopRunnable",
    "MiniLMEmbeddings",
    "SCMMiddleware",
    "SurpriseTreeRetriever",
    "TripletKVStore",
    "TripletMemoryStore",
    "add_positions",
    "make_memory_tools",
]
