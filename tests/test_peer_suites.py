"""The frameworks' own standard suites, unchanged, on what we hand out: langchain-tests' ``ToolsUnitTests`` and
``ToolsIntegrationTests`` on the memory tools, ``EmbeddingsUnitTests`` and ``EmbeddingsIntegrationTests`` on
``MiniLMEmbeddings``; LlamaIndex's rerank events from ``FragRelPostprocessor`` through the instrumentation
dispatcher."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_tests")
pytest.importorskip("llama_index.core")

from langchain_tests.integration_tests import EmbeddingsIntegrationTests, ToolsIntegrationTests
from langchain_tests.unit_tests import EmbeddingsUnitTests, ToolsUnitTests
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from pydantic import Field

from fragrel_integrations.core.triplets import TripletStore
from fragrel_integrations.langchain import MiniLMEmbeddings, make_memory_tools
from fragrel_integrations.llama_index import FragRelPostprocessor
from fragrel_integrations.testing import HashingEmbedder


def _tools():
    store = TripletStore(":memory:", embedder=HashingEmbedder(dim=64))
    store.write(("Dan Jaffe", "works at", "Google"), namespace=("memories",))
    return {tool.name: tool for tool in make_memory_tools(store)}


WRITE = {"subject": "Ann", "relation": "lives in", "object": "Lisbon"}
READ = {"subject": "Dan Jaffe", "relation": "works at", "object": ""}


class _WriteTool:
    """The memory_write tool and an example call (shared by its unit and integration suites)."""

    @property
    def tool_constructor(self):
        return _tools()["memory_write"]

    @property
    def tool_invoke_params_example(self) -> dict:
        return WRITE


class _ReadTool:
    @property
    def tool_constructor(self):
        return _tools()["memory_read"]

    @property
    def tool_invoke_params_example(self) -> dict:
        return READ


class _MiniLM:
    @property
    def embeddings_class(self):
        return MiniLMEmbeddings

    @property
    def embedding_model_params(self) -> dict:
        return {"show_progress": False}


class TestMemoryWriteToolUnit(_WriteTool, ToolsUnitTests):
    pass


class TestMemoryWriteToolIntegration(_WriteTool, ToolsIntegrationTests):
    pass


class TestMemoryReadToolUnit(_ReadTool, ToolsUnitTests):
    pass


class TestMemoryReadToolIntegration(_ReadTool, ToolsIntegrationTests):
    pass


class TestMiniLMEmbeddingsUnit(_MiniLM, EmbeddingsUnitTests):
    pass


@pytest.mark.slow
class TestMiniLMEmbeddingsIntegration(_MiniLM, EmbeddingsIntegrationTests):
    """The real embedded all-MiniLM-L6-v2 (shipped in a package: offline)."""


# ------------------------------------------------------------------------------------------ LlamaIndex events


class _Collect(BaseEventHandler):
    events: list = Field(default_factory=list)

    @classmethod
    def class_name(cls) -> str:
        return "Collect"

    def handle(self, event, **kwargs) -> None:
        self.events.append(event)


def test_postprocessor_emits_rerank_start_and_end_events():
    handler = _Collect()
    root = get_dispatcher()
    root.add_event_handler(handler)
    try:
        nodes = [
            NodeWithScore(node=TextNode(text=f"part {i}", metadata={"doc_id": "d", "position": i}), score=1.0 - i / 10)
            for i in range(6)
        ]
        post = FragRelPostprocessor(top_n=3, embedder=HashingEmbedder(dim=32))
        out = post.postprocess_nodes(nodes, query_bundle=QueryBundle("part"))
    finally:
        root.event_handlers.remove(handler)
    starts = [e for e in handler.events if isinstance(e, ReRankStartEvent)]
    ends = [e for e in handler.events if isinstance(e, ReRankEndEvent)]
    assert len(starts) == 1 and len(ends) == 1
    assert starts[0].top_n == 3 and starts[0].model_name == "fragrel:auto"
    assert [n.node.node_id for n in starts[0].nodes] == [n.node.node_id for n in nodes]
    assert starts[0].query.query_str == "part"
    assert [n.node.node_id for n in ends[0].nodes] == [n.node.node_id for n in out] and len(out) == 3
    assert handler.events.index(starts[0]) < handler.events.index(ends[0])
    assert starts[0].span_id == ends[0].span_id  # inside the postprocessor's span


def test_openinference_traces_show_a_reranker_span_and_retriever_spans_named_for_our_classes():
    pytest.importorskip("openinference.instrumentation.llama_index")
    pytest.importorskip("opentelemetry.sdk")
    from llama_index.core.graph_stores.types import Relation
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from fragrel_integrations.llama_index import TripletGraphStore, TripletMemoryRetriever

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = LlamaIndexInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        nodes = [
            NodeWithScore(node=TextNode(text=f"part {i}", metadata={"doc_id": "d", "position": i}), score=1.0 - i / 10)
            for i in range(6)
        ]
        out = FragRelPostprocessor(top_n=3, embedder=HashingEmbedder(dim=32)).postprocess_nodes(
            nodes, query_bundle=QueryBundle("part")
        )
        graph = TripletGraphStore(embedder=HashingEmbedder(dim=32))
        graph.upsert_relations([Relation(label="knows", source_id="Ann", target_id="Bo")])
        TripletMemoryRetriever(graph).retrieve("Ann>>knows>>")
    finally:
        instrumentor.uninstrument()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    rerank = next(s for name, s in spans.items() if name.startswith("FragRelPostprocessor."))
    attrs = rerank.attributes
    assert attrs["openinference.span.kind"] == "RERANKER"
    assert attrs["reranker.model_name"] == "fragrel:auto" and attrs["reranker.top_k"] == 3
    assert attrs["reranker.query"] == "part"
    assert [attrs[f"reranker.output_documents.{i}.document.id"] for i in range(3)] == [n.node.node_id for n in out]
    assert "reranker.output_documents.3.document.id" not in attrs
    assert spans["TripletMemoryRetriever.retrieve"].attributes["openinference.span.kind"] == "RETRIEVER"
