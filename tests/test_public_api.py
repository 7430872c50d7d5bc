"""The public names DESIGN.md promises, pinned; importing the package loads no framework and no model."""

import subprocess
import sys

import pytest

import fragrel_integrations


def test_top_level_all_is_pinned():
    assert sorted(fragrel_integrations.__all__) == sorted(
        [
            "BM25Scorer",
            "CallableRelation",
            "CompositeRelation",
            "ContextRelation",
            "DenseScorer",
            "Embedder",
            "Fragment",
            "FragmentLayout",
            "FragmentStore",
            "FragRelIndex",
            "GroundedAnswer",
            "HybridScorer",
            "InnerLoopEngine",
            "InnerLoopResult",
            "MemoryItem",
            "Relation",
            "ScoredFragment",
            "Scorer",
            "SelfControlledMemory",
            "SemanticRelation",
            "StagedHybridScorer",
            "SurpriseTree",
            "TreeConfig",
            "TreeHit",
            "Triplet",
            "TripletStore",
            "__version__",
            "grounded_answer",
            "relation_aware_scores",
            "rerank",
            "select",
            "split_lines",
            "split_turns",
            "split_words",
        ]
    )
    for name in fragrel_integrations.__all__:
        assert hasattr(fragrel_integrations, name), name
    # the top level re-exports the whole core facade (one list, so the two cannot drift)
    assert set(fragrel_integrations.core.__all__) <= set(fragrel_integrations.__all__)


def test_import_has_no_side_effects():
    code = (
        "import sys, fragrel_integrations, fragrel_integrations.cli;"
        "heavy = [m for m in ('langchain_core', 'llama_index', 'torch', 'sentence_transformers') if m in sys.modules];"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_components_are_top_level_and_lazy():
    code = (
        "import sys, fragrel_integrations as f;"
        "lazy = ('core.tree', 'core.triplets', 'core.scm', 'core.inner_loop');"
        "print([m for m in lazy if 'fragrel_integrations.' + m in sys.modules]);"
        "from fragrel_integrations import SurpriseTree, TripletStore, SelfControlledMemory, InnerLoopEngine;"
        "from fragrel_integrations.core.tree import SurpriseTree as T;"
        "from fragrel_integrations.core.triplets import TripletStore as S;"
        "from fragrel_integrations.core.scm import SelfControlledMemory as M;"
        "from fragrel_integrations.core.inner_loop import InnerLoopEngine as E;"
        "print((SurpriseTree, TripletStore, SelfControlledMemory, InnerLoopEngine) == (T, S, M, E));"
        "print('SurpriseTree' in dir(f))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:3] == ["[]", "True", "True"]
    with pytest.raises(AttributeError, match="no attribute 'NotAComponent'"):
        fragrel_integrations.NotAComponent  # noqa: B018


def test_models_all_is_pinned_and_lazy():
    import fragrel_integrations.models as models

    assert models.__all__ == [
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
    assert models.ReplyFormat.choice(["yes", "no"]).kind == "choice"  # resolved lazily
    with pytest.raises(AttributeError):
        models.not_a_model  # noqa: B018
