"""LlamaIndex: ``FragRelLLM`` is a plain chat ``LLM`` (function calling: LlamaIndex's ``OpenAILike`` / ``LlamaCPP``);
``use_embedded_models`` sets LlamaIndex's global ``Settings`` to the embedded models."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.llms.function_calling import FunctionCallingLLM

from fragrel_integrations.llama_index import FragRelLLM
from fragrel_integrations.testing import ScriptedChatModel


def test_a_model_without_tool_calling_is_no_function_calling_llm():
    llm = FragRelLLM(model=ScriptedChatModel(["hi"]))
    assert llm.metadata.is_function_calling_model is False and not isinstance(llm, FunctionCallingLLM)


def _run(code: str) -> str:
    import subprocess
    import sys
    import textwrap

    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_use_embedded_models_rejects_non_bools():
    from fragrel_integrations.llama_index import use_embedded_models

    with pytest.raises(TypeError, match=r"Settings\.embed_model"):
        use_embedded_models(embed_model="minilm")


@pytest.mark.slow
def test_use_embedded_models_makes_the_default_quickstart_run_offline():
    """In a fresh process (Settings are global): no OpenAI package, no key, no network; index + query engine with
    no embed_model=/llm= arguments run on MiniLM and SmolLM2."""
    out = _run(
        """
        import os, sys
        os.environ.pop("OPENAI_API_KEY", None)
        class Hide:  # LlamaIndex's OpenAI defaults must not be reached
            def find_spec(self, name, path=None, target=None):
                if name.startswith(("llama_index.embeddings.openai", "llama_index.llms.openai", "openai")):
                    raise ImportError(f"No module named {name!r}")
        sys.meta_path.insert(0, Hide())
        from llama_index.core import Document, Settings, VectorStoreIndex
        from fragrel_integrations.llama_index import FragRelLLM, MiniLMEmbedding, use_embedded_models
        embed, llm = use_embedded_models()
        print(Settings.embed_model is embed, isinstance(embed, MiniLMEmbedding), Settings.llm is llm)
        docs = [Document(text="Mary went to the kitchen."), Document(text="John picked up the football.")]
        engine = VectorStoreIndex.from_documents(docs).as_query_engine(similarity_top_k=1)
        response = engine.query("Who picked up the football?")
        print(response.source_nodes[0].node.get_content(), bool(str(response).strip()))
        """
    )
    assert out.splitlines() == ["True True True", "John picked up the football. True"]
