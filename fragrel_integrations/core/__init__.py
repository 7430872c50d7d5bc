"""Framework-free core: types, splitters, relations, scoring, selection, the index, the fragment store and
grounded answers."""

from .fragments import Fragment, ScoredFragment
from .grounding import GroundedAnswer, grounded_answer
from .index import FragRelIndex
from .relation_aware import relation_aware_scores
from .relations import CallableRelation, CompositeRelation, ContextRelation, FragmentLayout, Relation, SemanticRelation
from .rerank import rerank
from .scorers import BM25Scorer, DenseScorer, HybridScorer, Scorer
from .selection import select
from .splitters import split_lines, split_turns, split_words
from .staged import StagedHybridScorer
from .store import FragmentStore

__all__ = [
    "BM25Scorer",
    "CallableRelation",
    "CompositeRelation",
    "ContextRelation",
    "DenseScorer",
    "FragRelIndex",
    "Fragment",
    "FragmentLayout",
    "FragmentStore",
    "GroundedAnswer",
    "HybridScorer",
    "Relation",
    "ScoredFragment",
    "Scorer",
    "SemanticRelation",
    "StagedHybridScorer",
    "grounded_answer",
    "relation_aware_scores",
    "rerank",
    "select",
    "split_lines",
    "split_turns",
    "split_words",
]
