"""What LlamaIndex checks of its reference property-graph store (``SimplePropertyGraphStore``: add, delete, get by
name / relation / property, chunk nodes, delete by node id and by source document), checked on ``TripletGraphStore``
through public calls only, side by side with the reference store where both should answer the same.

Round trips return what was put: a relation comes back with exactly the properties it was upserted with (the triplet
key and validity that the memory adds are read through ``TripletMemoryRetriever`` or ``core``)."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.graph_stores.simple_labelled import SimplePropertyGraphStore
from llama_index.core.graph_stores.types import ChunkNode, EntityNode, Relation
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

from fragrel_integrations.llama_index import TripletGraphStore, TripletMemoryRetriever
from fragrel_integrations.testing import HashingEmbedder


def ours() -> TripletGraphStore:
    return TripletGraphStore(embedder=HashingEmbedder(dim=64))


@pytest.fixture(params=["reference", "triplet"])
def store(request):
    return SimplePropertyGraphStore() if request.param == "reference" else ours()


def _triplet():
    a = EntityNode(name="alpha")
    b = EntityNode(name="beta", properties={"colour": "green"})
    rel = Relation(label="knows", source_id=a.id, target_id=b.id, properties={"since": 2020})
    return a, rel, b


def _put(store, triplets):
    store.upsert_nodes([n for t in triplets for n in (t[0], t[2])])
    store.upsert_relations([t[1] for t in triplets])


def test_upsert_then_read_back_by_entity(store):
    a, rel, b = _triplet()
    _put(store, [(a, rel, b)])
    assert len(store.get_triplets(entity_names=["alpha"])) == 1


def test_round_trip_is_equal_to_what_was_put(store):
    a, rel, b = _triplet()
    _put(store, [(a, rel, b)])
    for query in (
        {"entity_names": ["alpha"]},
        {"entity_names": ["beta"]},
        {"relation_names": ["knows"]},
        {"properties": {"colour": "green"}},  # a node's property
        {"properties": {"since": 2020}},  # the relation's property
        {"ids": [a.id]},
    ):
        assert store.get_triplets(**query) == [(a, rel, b)], query
    assert store.get_triplets(properties={"colour": "red"}) == []
    assert store.get_triplets() == []  # nothing asked, nothing returned (as the reference store)


def test_delete_by_entity_removes_the_triplet(store):
    a, rel, b = _triplet()
    _put(store, [(a, rel, b)])
    store.delete(ids=[a.id])
    assert store.get_triplets(entity_names=["alpha", "beta"]) == []


def _chunks():
    return [TextNode(id_="n1", text="first chunk"), TextNode(id_="n2", text="second chunk")]


def test_llama_nodes_round_trip(store):
    n1, n2 = _chunks()
    store.upsert_llama_nodes([n1, n2])
    got = store.get_llama_nodes(["n1", "n2"])
    assert [(n.id_, n.text) for n in got] == [("n1", "first chunk"), ("n2", "second chunk")]
    assert sorted(n.id for n in store.get(ids=["n1", "n2"])) == ["n1", "n2"]


def test_delete_llama_nodes_by_node_id(store):
    store.upsert_llama_nodes(_chunks())
    store.delete_llama_nodes(node_ids=["n1"])
    assert [n.id for n in store.get(ids=["n1", "n2"])] == ["n2"]


@pytest.mark.parametrize(("source", "left"), [("n2", []), ("n3", ["n2"])])
def test_delete_llama_nodes_by_source_document(store, source, left):
    n1 = TextNode(id_="n1", text="n1", relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=source)})
    n2 = TextNode(id_="n2", text="n2")
    store.upsert_llama_nodes([n1, n2])
    store.delete_llama_nodes(ref_doc_ids=[source])
    assert sorted(n.id for n in store.get(ids=["n1", "n2"])) == left


def test_entity_and_chunk_nodes_keep_label_and_properties():
    g = ours()
    person = EntityNode(name="Ann", label="PERSON", properties={"age": 41})
    chunk = ChunkNode(text="Ann is 41.", id_="c1", properties={"page": 3})
    g.upsert_nodes([person, chunk])
    assert g.get(ids=["Ann"]) == [person]
    assert g.get(ids=["c1"]) == [chunk]


def test_the_memory_still_knows_keys_and_validity():
    g = ours()
    a, rel, b = _triplet()
    _put(g, [(a, rel, b)])
    hit = TripletMemoryRetriever(g).retrieve("alpha>>knows>>")[0]
    assert hit.node.metadata["triplet_key"].startswith("rel-") and hit.node.metadata["valid_to"] is None
    record = g.core.records()[0]
    assert record.payload == {"since": 2020} and record.valid_from > 0
