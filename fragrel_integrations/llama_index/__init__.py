"""LlamaIndex components (install with ``pip install 'fragrel-integrations[llama-index]'``).

- :class:`FragRelRetriever` wraps any LlamaIndex retriever and re-ranks its nodes with FragRel.
- :class:`FragRelPostprocessor` does the same as a node postprocessor inside a query engine;
  :class:`GroundedSynthesizer` makes the engine's reply an answer the retrieved nodes support, cited.
- :class:`FragRelIndexRetriever` is a retriever over a core ``FragRelIndex`` (texts in, no vector store).
- :class:`PositionTagger` / :func:`tag_positions` write ``fragrel_doc_id`` and ``fragrel_position`` into node
  metadata.
- :class:`TripletGraphStore` is a ``PropertyGraphStore`` over the RET-LLM triplet memory;
  :class:`TripletMemoryRetriever` reads it.
- :class:`InnerLoopQueryEngine` answers with ILM-TR's inner loop (short-term memory) over any retriever.
- :class:`SCMMemory` is SCM's self-controlled long-term chat memory for chat engines and agents;
  :class:`SCMMemoryBlock` is the same memory as one block of LlamaIndex's ``Memory``;
  :class:`VectorStoreStreamIndex` lets it search a vector store you already run.
- :class:`SurpriseTreeRetriever` retrieves from ILM-TR's surprise tree; :class:`SurpriseExtractor` adds summary
  and surprising facts to each node during ingestion.
- :class:`MiniLMEmbedding` is the embedded offline all-MiniLM-L6-v2 as a LlamaIndex embedding model;
  :class:`FragRelLLM` is any of our chat models (the embedded SmolLM2, an OpenAI-compatible server) as an ``LLM``
  (function calling with the embedded model); :func:`use_embedded_models` sets LlamaIndex's global ``Settings`` to
  both, so quickstarts run offline.

>>> from fragrel_integrations.llama_index import FragRelRetriever, PositionTagger   # doctest: +SKIP
"""

from .._optional import require

require("llama_index.core", "llama-index")

from .answer import GroundedSynthesizer  # noqa: E402
from .embeddings import MiniLMEmbedding  # noqa: E402
from .indexing import PositionTagger, tag_positions  # noqa: E402
from .inner_loop import InnerLoopQueryEngine  # noqa: E402
from .llm import FragRelLLM  # noqa: E402
from .postprocessor import FragRelPostprocessor  # noqa: E402
from .retriever import FragRelIndexRetriever, FragRelRetriever  # noqa: E402
from .scm_index import VectorStoreStreamIndex  # noqa: E402
from .scm_memory import SCMMemory  # noqa: E402
from .scm_memory_block import SCMMemoryBlock  # noqa: E402
from .settings import use_embedded_models  # noqa: E402
from .surprise_tree import SurpriseExtractor, SurpriseTreeRetriever  # noqa: E402
from .triplet_graph_store import TripletGraphStore, TripletMemoryRetriever  # noqa: E402

__all__ = [
    "FragRelIndexRetriever",
    "FragRelLLM",
    "FragRelPostprocessor",
    "FragRelRetriever",
    "GroundedSynthesizer",
    "InnerLoopQueryEngine",
    "MiniLMEmbedding",
    "PositionTagger",
    "SCMMemory",
    "SCMMemoryBlock",
    "SurpriseExtractor",
    "SurpriseTreeRetriever",
    "TripletGraphStore",
    "TripletMemoryRetriever",
    "VectorStoreStreamIndex",
    "tag_positions",
    "use_embedded_models",
]
