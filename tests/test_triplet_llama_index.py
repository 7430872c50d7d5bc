"""LlamaIndex triplet memory: TripletGraphStore implements PropertyGraphStore (real PropertyGraphIndex ingestion
with a kg extractor, get/get_triplets/get_rel_map/delete/vector_query), and TripletMemoryRetriever reads it
with exact + fuzzy lookup inside a real query engine."""

from __future__ import annotations

import pytest
from _triplet_fixtures import BACKENDS, make_backend
from llama_index.core import Document, PropertyGraphIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.graph_stores.types import KG_NODES_KEY, KG_RELATIONS_KEY, EntityNode, Relation
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import TransformComponent
from llama_index.core.vector_stores.types import VectorStoreQuery

from fragrel_integrations.core.triplets import TripletStore
from fragrel_integrations.llama_index.triplet_graph_store import TripletGraphStore, TripletMemoryRetriever
from fragrel_integrations.testing import HashingEmbedder


@pytest.fixture(params=BACKENDS)
def graph(request, tmp_path):
    g = TripletGraphStore(
        TripletStore(make_backend(request.param, tmp_path), embedder=HashingEmbedder(dim=128, seed=4))
    )
    g.upsert_nodes([EntityNode(name="Dan Jaffe", label="PERSON", properties={"age": 41})])
    g.upsert_relations(
        [
            Relation(label="works at", source_id="Dan Jaffe", target_id="Google", properties={"source": "bio"}),
            Relation(label="based in", source_id="Google", target_id="Mountain View"),
            Relation(label="lives in", source_id="Sara Lee", target_id="Berlin"),
        ]
    )
    yield g
    g.core.close()


def names(triplets):
    return sorted((str(s.id), r.label, str(o.id)) for s, r, o in triplets)


def test_get_triplets_by_entity_relation_and_properties(graph):
    assert names(graph.get_triplets(entity_names=["Google"])) == [
        ("Dan Jaffe", "works at", "Google"),
        ("Google", "based in", "Mountain View"),
    ]
    assert names(graph.get_triplets(relation_names=["lives in"])) == [("Sara Lee", "lives in", "Berlin")]
    assert names(graph.get_triplets(properties={"source": "bio"})) == [("Dan Jaffe", "works at", "Google")]
    assert graph.get_triplets() == []
    subj, rel, _ = graph.get_triplets(entity_names=["Dan Jaffe"])[0]
    assert subj.label == "PERSON" and subj.properties == {"age": 41} and rel.properties["source"] == "bio"


def test_get_nodes_and_rel_map(graph):
    assert {n.id for n in graph.get()} == {"Dan Jaffe", "Google", "Mountain View", "Sara Lee", "Berlin"}
    assert [n.properties for n in graph.get(properties={"age": 41})] == [{"age": 41}]
    assert [n.id for n in graph.get(ids=["Berlin"])] == ["Berlin"]
    rel_map = graph.get_rel_map([EntityNode(name="Dan Jaffe")], depth=2)
    assert names(rel_map) == [("Dan Jaffe", "works at", "Google"), ("Google", "based in", "Mountain View")]
    assert names(graph.get_rel_map([EntityNode(name="Dan Jaffe")], depth=1)) == [("Dan Jaffe", "works at", "Google")]
    assert graph.get_rel_map([EntityNode(name="Dan Jaffe")], ignore_rels=["works at"])[0][1].label == "based in"


def test_upsert_is_idempotent_and_updates_properties(graph):
    graph.upsert_relations(
        [Relation(label="works at", source_id="Dan Jaffe", target_id="Google", properties={"source": "cv"})]
    )
    (t,) = graph.get_triplets(entity_names=["Dan Jaffe"])
    assert t[1].properties["source"] == "cv"
    assert graph.core.count() == 3


def test_delete_ends_triplets_and_removes_nodes(graph):
    graph.delete(entity_names=["Sara Lee"])
    assert graph.get_triplets(entity_names=["Sara Lee"]) == []
    assert graph.core.records(history=True)[-1].valid_to is not None  # history kept
    graph.delete(ids=["Dan Jaffe"])
    assert graph.get(properties={"age": 41}) == []


def test_vector_query_and_structured_query(graph):
    nodes, scores = graph.vector_query(VectorStoreQuery(query_str="Google", similarity_top_k=2))
    assert nodes[0].id == "Google" and scores[0] == pytest.approx(1.0)
    assert names(graph.structured_query("[MEM_READ{>>lives in>>}]")) == [("Sara Lee", "lives in", "Berlin")]
    with pytest.raises(NotImplementedError):
        graph.structured_query("MATCH (n) RETURN n")
    assert graph.get_schema()["relations"] == ["based in", "lives in", "works at"]


def test_retriever_exact_fuzzy_and_free_text(graph):
    retriever = TripletMemoryRetriever(graph)
    hits = retriever.retrieve("Dan Jaffe>>works at>>")
    assert [h.node.metadata["object"] for h in hits] == ["Google"] and hits[0].score == 1.0
    fuzzy = retriever.retrieve("[MEM_READ{Jaffe>>works at>>}]")  # "Jaffe" ~ "Dan Jaffe"
    assert [h.node.text for h in fuzzy] == ["Dan Jaffe works at Google"] and fuzzy[0].score < 1.0
    assert retriever.retrieve("Nobody>>works at>>") == []
    assert retriever.retrieve("Berlin")[0].node.metadata["subject"] == "Sara Lee"


class DictExtractor(TransformComponent):
    """Puts fixed entities/relations on each node, as LlamaIndex's LLM extractors do."""

    def __call__(self, nodes, **kwargs):
        for node in nodes:
            s, r, o = node.text.rstrip(".").split(" | ")
            node.metadata[KG_NODES_KEY] = [EntityNode(name=s, label="PERSON"), EntityNode(name=o, label="ORG")]
            node.metadata[KG_RELATIONS_KEY] = [Relation(label=r, source_id=s, target_id=o)]
        return nodes


def test_property_graph_index_ingests_into_the_triplet_memory(tmp_path):
    graph = TripletGraphStore(path=tmp_path / "pg.db", embedder=HashingEmbedder(dim=64))
    docs = [Document(text="Mike Jones | CEO of | Acme Corp."), Document(text="Sara Lee | works at | Acme Corp.")]
    index = PropertyGraphIndex.from_documents(
        docs,
        property_graph_store=graph,
        kg_extractors=[DictExtractor()],
        embed_model=MockEmbedding(embed_dim=8),
        llm=MockLLM(),
        embed_kg_nodes=False,
        show_progress=False,
    )
    assert names(graph.get_triplets(entity_names=["Acme Corp"])) == [
        ("Mike Jones", "CEO of", "Acme Corp"),
        ("Sara Lee", "works at", "Acme Corp"),
    ]
    chunks = [n for n in graph.core.get_nodes() if n.kind == "chunk"]
    assert len(chunks) == 2
    assert {n.get_content() for n in graph.get_llama_nodes([c.id for c in chunks])} == {d.text for d in docs}
    engine = RetrieverQueryEngine.from_args(TripletMemoryRetriever(index.property_graph_store), llm=MockLLM())
    response = engine.query(">>CEO of>>Acme Corp")
    assert [n.node.metadata["subject"] for n in response.source_nodes] == ["Mike Jones"]


def test_bad_arguments(tmp_path):
    with pytest.raises(TypeError):
        TripletGraphStore(store=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        TripletMemoryRetriever(object())  # type: ignore[arg-type]
    g = TripletGraphStore(embedder=HashingEmbedder(dim=16))
    with pytest.raises(ValueError):
        TripletMemoryRetriever(g, similarity_top_k=0)
