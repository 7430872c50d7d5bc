"""Fitting the ecosystem: one conversion for embedders (``models.as_embedder``) used by the adapters, the
``models`` package's lazy names, stores that take a path positionally, memory tools over framework stores,
``fragrel_integrations.langchain`` without ``langchain``/``langgraph``, progress bars, and ``py.typed``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from langchain_core.embeddings import DeterministicFakeEmbedding
from llama_index.core.embeddings import MockEmbedding

import fragrel_integrations
import fragrel_integrations.models
from fragrel_integrations.langchain import MiniLMEmbeddings
from fragrel_integrations.llama_index import MiniLMEmbedding, TripletGraphStore
from fragrel_integrations.models import Embedder, as_embedder
from fragrel_integrations.models.convert import optional_embedder
from fragrel_integrations.models.embedder import WrappedEmbedder
from fragrel_integrations.models.framework_models import LlamaIndexEmbedder
from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel

ROOT = Path(fragrel_integrations.__file__).resolve().parent.parent


def _run(code: str) -> str:
    """Run ``code`` in a fresh interpreter on this checkout; return its stdout."""
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip()


# ------------------------------------------------------------------------------------ as_embedder
def test_as_embedder_converts_every_kind_of_embedding_model():
    own = HashingEmbedder(dim=8)
    assert as_embedder(own) is own
    lc = DeterministicFakeEmbedding(size=8)  # a real LangChain Embeddings
    assert as_embedder(lc) is lc and isinstance(lc, Embedder)
    li = as_embedder(MockEmbedding(embed_dim=8))  # a real LlamaIndex BaseEmbedding
    assert isinstance(li, LlamaIndexEmbedder)
    assert np.asarray(li.embed_documents(["a", "b"])).shape == (2, 8) and li.embed_query("a").shape == (8,)
    # the project's LangChain wrapper around a custom embedder: its embedder, unwrapped
    assert as_embedder(MiniLMEmbeddings(own)) is own
    assert optional_embedder(None) is None


def test_as_embedder_keeps_the_minilm_wrappers_lazy():
    lc, li = MiniLMEmbeddings(), MiniLMEmbedding()
    for wrapper in (lc, li):
        converted = as_embedder(wrapper)
        assert isinstance(converted, WrappedEmbedder) and converted.wrapper is wrapper
    assert lc._embedder is None and li._model is None  # nothing was loaded by the conversion


def test_as_embedder_asks_any_embedder_provider_and_the_models_layer_knows_no_adapter():
    own = HashingEmbedder(dim=8)

    class Holder:  # a third-party wrapper: nothing in the models layer names it
        def fragrel_embedder(self):
            return own

    assert as_embedder(Holder()) is own
    assert as_embedder(MiniLMEmbedding(model=None)).wrapper is not None
    models_dir = Path(fragrel_integrations.models.__file__).parent
    for path in models_dir.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for adapter in ("fragrel_integrations.langchain", "fragrel_integrations.llama_index", "from ..langchain",
                        "from ..llama_index", "from ...langchain", "from ...llama_index"):  # fmt: skip
            assert adapter not in text, f"{path.name} names the adapter layer ({adapter})"


def test_as_embedder_rejects_with_a_message_naming_the_options():
    with pytest.raises(TypeError, match="LangChain Embeddings, a LlamaIndex BaseEmbedding"):
        as_embedder(object())
    with pytest.raises(TypeError, match="embedder=None"):
        as_embedder(None)


def test_the_error_messages_point_to_an_importable_as_embedder():
    from fragrel_integrations.models.embedder import embed_documents

    with pytest.raises(TypeError, match=r"fragrel_integrations\.models\.as_embedder") as info:
        embed_documents(MockEmbedding(embed_dim=4), ["x"])
    path = str(info.value).split("with ")[-1]
    module, name = path.rsplit(".", 1)
    assert getattr(__import__(module, fromlist=[name]), name) is as_embedder


def test_triplet_graph_store_takes_llama_index_and_langchain_embeddings(tmp_path):
    for embedder in (MockEmbedding(embed_dim=16), DeterministicFakeEmbedding(size=16)):
        graph = TripletGraphStore(tmp_path / f"{type(embedder).__name__}.db", embedder=embedder)
        graph.core.write(("Dan", "works at", "Google"))
        assert [r.t3 for r in graph.core.read("Dan", "works at")] == ["Google"]
        graph.core.close()


@pytest.mark.slow
def test_triplet_graph_store_with_the_projects_own_llama_index_embedding(real_embedder):
    graph = TripletGraphStore(embedder=MiniLMEmbedding())
    assert graph.core.embedder.embedder is real_embedder  # the shared model, not a second copy
    graph.core.write(("Dan Jaffe", "works at", "Google"))
    hits = graph.core.read("Dan Jafe", "works at")  # misspelt: the fuzzy (embedding) path
    assert [r.t3 for r in hits] == ["Google"]


def test_scm_and_tree_adapters_take_framework_embeddings():
    from fragrel_integrations.langchain import SCMMiddleware, SurpriseTreeRetriever
    from fragrel_integrations.llama_index import SCMMemory

    controller = ScriptedChatModel(["(B)"], cycle=True)
    memory = SCMMemory(llm=controller, embedder=MockEmbedding(embed_dim=8), session_id="s")
    assert isinstance(memory.core.embedder, LlamaIndexEmbedder)
    middleware = SCMMiddleware(model=controller, embedder=MockEmbedding(embed_dim=8), session_id="s")
    assert isinstance(middleware.memory.embedder, LlamaIndexEmbedder)
    summaries = ScriptedChatModel(lambda m: "(Summary): Pets.\n(Surprise): None.", cycle=True)
    tree = SurpriseTreeRetriever.from_texts(
        ["Cats purr softly. Dogs bark loudly."], chat_model=summaries, embedder=MockEmbedding(embed_dim=8),
        show_progress=False, k=1,
    )  # fmt: skip
    assert isinstance(tree.tree.embedder, LlamaIndexEmbedder)
    assert tree.invoke("cats")


# ------------------------------------------------------------------------------------ the models package
def test_models_package_names_resolve_and_import_nothing_heavy():
    import fragrel_integrations.models as models

    for name in models.__all__:
        assert getattr(models, name) is not None, name
    out = _run(
        """
        import sys, fragrel_integrations.models as m
        from fragrel_integrations.models import as_embedder, as_chat_model, Embedder
        heavy = ("llama_cpp", "openai", "langchain_core", "llama_index", "sentence_transformers", "torch")
        print([h for h in heavy if h in sys.modules])
        """
    )
    assert out == "[]"


# ------------------------------------------------------------------------------------ stores and tools
def test_triplet_stores_take_a_path_positionally_like_the_core(tmp_path):
    from fragrel_integrations.langchain import TripletMemoryStore

    path = tmp_path / "memory.db"
    memory = TripletMemoryStore(str(path), embedder=HashingEmbedder(dim=16))
    memory.put(("m",), "job", {"subject": "Ann", "relation": "works at", "object": "Acme"})
    memory.close()
    again = TripletMemoryStore(path, embedder=HashingEmbedder(dim=16))  # a Path works too
    assert again.get(("m",), "job").value["object"] == "Acme"
    graph = TripletGraphStore(path, embedder=HashingEmbedder(dim=16), namespace=("m",))
    assert [str(t[2]) for t in graph.get_triplets(entity_names=["Ann"])] == ["Acme"]
    assert TripletMemoryStore(graph.core).core is graph.core  # a built core store still works
    with pytest.raises(ValueError, match="path twice"):
        TripletGraphStore(str(path), path=path)


def test_memory_tools_take_the_framework_stores():
    from fragrel_integrations.langchain import TripletKVStore, TripletMemoryStore, make_memory_tools

    memory = TripletMemoryStore(embedder=HashingEmbedder(dim=16))
    graph = TripletGraphStore(memory.core)
    kv = TripletKVStore(memory)  # the KV view takes the framework store too
    assert kv.store is memory.core
    for store in (memory, kv, graph, memory.core):
        write, read = make_memory_tools(store, namespace=("t",))
        write.invoke({"subject": "Bo", "relation": "lives in", "object": "Oslo"})
        assert "Oslo" in read.invoke({"subject": "Bo", "relation": "lives in"})
    with pytest.raises(TypeError, match="TripletMemoryStore"):
        make_memory_tools(object())


# ------------------------------------------------------------------------------------ light imports
def test_langchain_package_imports_without_langchain_or_langgraph():
    out = _run(
        """
        import sys, time
        from fragrel_integrations.langchain import FragRelRetriever, MiniLMEmbeddings, FragRelChatModel
        print(sorted(m for m in ("langchain", "langchain.agents", "langgraph") if m in sys.modules))
        import fragrel_integrations.langchain as lc
        lc.TripletMemoryStore
        print("langgraph" in sys.modules)
        """
    )
    assert out.splitlines() == ["[]", "True"]


def test_langchain_package_with_langchain_core_alone():
    """langgraph and langchain hidden: the retriever works, the middleware names the extra."""
    out = _run(
        """
        import sys
        class Hide:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("langgraph", "langchain"):
                    raise ImportError(f"No module named {name!r}")
        sys.meta_path.insert(0, Hide())
        from langchain_core.runnables import RunnableLambda
        from langchain_core.documents import Document
        from fragrel_integrations.langchain import FragRelRetriever
        from fragrel_integrations.testing import HashingEmbedder
        docs = [Document(t, metadata={"doc_id": "d", "position": i}) for i, t in enumerate(["a b", "b c", "c d"])]
        r = FragRelRetriever(base_retriever=RunnableLambda(lambda q: docs), embedder=HashingEmbedder(dim=8), k=2)
        print(len(r.invoke("b")))
        try:
            from fragrel_integrations.langchain import SCMMiddleware
        except ImportError as exc:
            print(exc)
        """
    )
    first, error = out.splitlines()
    assert first == "2"
    assert "SCMMiddleware needs 'langchain'" in error and "fragrel-integrations[langchain]" in error


# ------------------------------------------------------------------------------------ progress
def test_minilm_embeddings_show_a_silenceable_progress_bar(capsys):
    texts = [f"text {i}" for i in range(6)]
    MiniLMEmbeddings(HashingEmbedder(dim=8), batch_size=2).embed_documents(texts)
    assert "embedding" in capsys.readouterr().err
    MiniLMEmbeddings(HashingEmbedder(dim=8), batch_size=2, show_progress=False).embed_documents(texts)
    MiniLMEmbeddings(HashingEmbedder(dim=8), batch_size=8).embed_documents(texts)  # one batch: no bar
    assert capsys.readouterr().err == ""
    with pytest.raises(TypeError, match="show_progress"):
        MiniLMEmbeddings(show_progress="yes")  # type: ignore[arg-type]


def test_inner_loop_shows_a_silenceable_progress_bar(capsys):
    from fragrel_integrations.core.inner_loop import InnerLoopEngine
    from fragrel_integrations.langchain import InnerLoopRunnable

    model = ScriptedChatModel(["The milk is in the hallway."], cycle=True)
    engine = InnerLoopEngine(lambda q: ["Sandra took the milk to the hallway."], model, max_loops=3)
    assert engine.run("Where is the milk?").converged
    assert "inner loop" in capsys.readouterr().err
    quiet = engine.with_settings(show_progress=False)
    assert quiet.run("Where is the milk?").converged
    runnable = InnerLoopRunnable(retriever=lambda q: [], model=model, show_progress=False)
    runnable.invoke("Where is the milk?")
    assert capsys.readouterr().err == ""


# ------------------------------------------------------------------------------------ typing
def test_package_is_marked_typed():
    assert (ROOT / "fragrel_integrations" / "py.typed").is_file()
