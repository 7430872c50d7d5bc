"""fragrel-integrations: relation-aware retrieval and memory for LangChain and LlamaIndex.

Framework adapters live in :mod:`fragrel_integrations.langchain` and :mod:`fragrel_integrations.llama_index`;
importing this package imports neither framework and loads no model.
"""

from .core import (
    BM25Scorer,
    CallableRelation,
    CompositeRelation,
    ContextRelation,
    DenseScorer,
    Fragment,
    FragmentLayout,
    FragmentStore,
    FragRelIndex,
    HybridScorer,
    Relation,
    ScoredFragment,
    SemanticRelation,
    relation_aware_scores,
    rerank,
    split_lines,
    split_turns,
    split_words,
)
from .models.base import Embedder

__version__ = "0.1.0"

__all__ = [
    "BM25Scorer",
    "CallableRelation",
    "CompositeRelation",
    "ContextRelation",
    "DenseScorer",
    "Embedder",
    "FragRelIndex",
    "Fragment",
    "FragmentLayout",
    "FragmentStore",
    "HybridScorer",
    "Relation",
    "ScoredFragment",
    "SemanticRelation",
    "__version__",
    "relation_aware_scores",
    "rerank",
    "split_lines",
    "split_turns",
    "split_words",
]
