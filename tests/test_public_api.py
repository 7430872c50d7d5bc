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
    )
    for name in fragrel_integrations.__all__:
        assert hasattr(fragrel_integrations, name), name


def test_import_has_no_side_effects():
    code = (
        "import sys, fragrel_integrations, fragrel_integrations.cli;"
        "heavy = [m for m in ('langchain_core', 'llama_index', 'torch', 'sentence_transformers') if m in sys.modules];"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


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
        "ReplyFormat",
        "ResponseCache",
        "RetryPolicy",
        "RetryingChatModel",
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
