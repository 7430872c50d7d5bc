"""The surprise tree (ILM-TR on RAPTOR): a recursive summary tree whose nodes also keep surprising facts.

Needs scikit-learn (Gaussian mixtures, PCA); UMAP is used for dimension reduction when ``umap-learn`` is
installed. Modules: :mod:`.chunking` (sentence-aware chunks), :mod:`.summary` (prompt and parser),
:mod:`.summariser` (cached, concurrent summary calls), :mod:`.extractive` (model-free summaries and surprise
notes), :mod:`.clustering` (GMM clustering of summaries), :mod:`.tree` (build / insert / retrieve),
:mod:`.tree_relation` (FragRel over the tree) and :mod:`.persist` (SQLite / JSON).
"""

from .chunking import chunk_text, split_sentences
from .clustering import cluster_embeddings, gmm_clusters, pack_by_tokens, reduce_dimensions
from .extractive import ExtractiveSummariser, central_sentences, leave_one_out_similarity, surprising_sentences
from .state import MAX_METADATA_DEPTH, check_state
from .summariser import BuildReport, Summariser, SummaryResult
from .summary import PROMPT_VERSION, SUMMARY_SYSTEM_PROMPT, ParsedSummary, parse_summary, summary_messages
from .summary_tree import SurpriseTree
from .tree_file import load_tree, save_tree
from .tree_nodes import FIELDS, SUMMARISERS, TreeConfig, TreeHit, TreeNode
from .tree_relation import TreeRelation

__all__ = [
    "FIELDS",
    "MAX_METADATA_DEPTH",
    "PROMPT_VERSION",
    "SUMMARISERS",
    "SUMMARY_SYSTEM_PROMPT",
    "BuildReport",
    "ExtractiveSummariser",
    "ParsedSummary",
    "Summariser",
    "SummaryResult",
    "SurpriseTree",
    "TreeConfig",
    "TreeHit",
    "TreeNode",
    "TreeRelation",
    "central_sentences",
    "check_state",
    "chunk_text",
    "cluster_embeddings",
    "gmm_clusters",
    "leave_one_out_similarity",
    "load_tree",
    "pack_by_tokens",
    "parse_summary",
    "reduce_dimensions",
    "save_tree",
    "split_sentences",
    "summary_messages",
    "surprising_sentences",
]
