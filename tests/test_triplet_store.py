"""TripletStore on both backends (SQLite file, real PostgreSQL server on 127.0.0.1): every query shape, exact vs
fuzzy lookup, no-match, single-valued superseding with validity intervals and ``as_of``, update/delete,
namespaces, persistence and bad input. The term embedder is the deterministic HashingEmbedder (word-overlap
cosines that can be computed by hand); the real MiniLM is used in the slow test at the end."""

from __future__ import annotations

import numpy as np
import pytest
from _triplet_fixtures import BACKENDS, get_pg, make_store, pg_skip_reason

from fragrel_integrations.core.triplets import (
    PostgresBackend,
    SQLiteBackend,
    Triplet,
    TripletStore,
    TripletWrite,
)
from fragrel_integrations.testing import HashingEmbedder

FACTS = [
    ("Mike Jones", "CEO of", "Acme Corp"),
    ("Sara Lee", "works at", "Acme Corp"),
    ("Sara Lee", "lives in", "Berlin"),
    ("Acme Corp", "based in", "Berlin"),
    ("Tom Hardy", "works at", "Globex"),
]


@pytest.fixture
def emb():
    return HashingEmbedder(dim=128, seed=3)


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path, emb):
    s = make_store(request.param, tmp_path, emb)
    s.write_many(FACTS)
    yield s
    s.close()


def triples(records):
    return sorted(tuple(r.triplet) for r in records)


# ------------------------------------------------------------------------------------------------ query shapes
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"t1": "Sara Lee"}, [FACTS[2], FACTS[1]]),
        ({"t2": "works at"}, [FACTS[1], FACTS[4]]),
        ({"t3": "Berlin"}, [FACTS[3], FACTS[2]]),
        ({"t1": "Sara Lee", "t2": "works at"}, [FACTS[1]]),
        ({"t1": "Acme Corp", "t3": "Berlin"}, [FACTS[3]]),
        ({"t2": "works at", "t3": "Acme Corp"}, [FACTS[1]]),
        ({"t1": "Mike Jones", "t2": "CEO of", "t3": "Acme Corp"}, [FACTS[0]]),
    ],
    ids=["t1", "t2", "t3", "t1t2", "t1t3", "t2t3", "all-three"],
)
def test_every_query_shape_returns_all_matching_triplets(store, query, expected):
    records = store.read(**query)
    assert triples(records) == sorted(expected)
    assert all(r.score == 1.0 and all(m.exact for m in r.matches) for r in records)


def test_query_without_any_field_is_rejected(store):
    with pytest.raises(ValueError, match="at least one"):
        store.read()
    with pytest.raises(ValueError, match="at least one"):
        store.read(t1="  ", t2="")


def test_empty_string_fields_are_wildcards(store):
    assert triples(store.read("Sara Lee", "", "")) == triples(store.read(t1="Sara Lee"))


def test_exact_match_is_case_and_space_insensitive_and_keeps_spelling(store):
    records = store.read(t1="  sara   LEE ")
    assert len(records) == 2 and {r.t1 for r in records} == {"Sara Lee"}
    assert records[0].matches[0].exact and records[0].matches[0].term == "Sara Lee"


# ------------------------------------------------------------------------------------------------ exact vs fuzzy
def test_exact_match_wins_over_fuzzy_alternatives(tmp_path, emb):
    s = TripletStore(tmp_path / "m.db", embedder=emb)
    s.write_many([("Apple", "makes", "phones"), ("Apple Inc", "based in", "Cupertino")])
    assert triples(s.read(t1="Apple")) == [("Apple", "makes", "phones")]


def test_fuzzy_fallback_finds_the_alternative_term_and_rechecks_its_exact_cosine(store, emb):
    # "Jones" is not a stored t1; HashingEmbedder gives cos("Jones", "Mike Jones") = 1/sqrt(2) ~ 0.707 >= 0.7
    records = store.read(t1="Jones")
    assert triples(records) == [FACTS[0]]
    (match,) = records[0].matches
    assert not match.exact and match.term == "Mike Jones" and match.query == "Jones"
    v = emb.embed_documents(["Jones", "Mike Jones"])
    assert match.similarity == pytest.approx(float(v[0] @ v[1]), abs=1e-5)
    assert records[0].score == pytest.approx(match.similarity)


def test_fuzzy_alternative_is_restricted_to_the_queried_field(store):
    # "Acme Corp" exists as t1 and t3; "Acme" as a relation must not match anything
    assert store.read(t2="Acme") == []
    assert triples(store.read(t3="Acme")) == triples(store.read(t3="Acme Corp"))


def test_no_alternative_means_empty_result(store):
    assert store.read(t1="Zanzibar Shipping") == []
    assert store.read(t1="Jones", fuzzy=False) == []  # exact only
    assert store.read(t1="Jones", threshold=0.9) == []  # the alternative fails the cosine re-check
    assert store.read(t1="Sara Lee", t2="CEO of") == []  # both terms exist, no triplet has both


def test_fuzzy_lookup_reads_the_stored_term_vectors(store):
    """The term index is built from the stored embeddings: a term whose stored vector points elsewhere is not
    found fuzzily (exact matching does not need the vectors), and changing ``fuzzy_index`` rebuilds the index."""
    assert [r.t1 for r in store.read(t1="Jones")] == ["Mike Jones"]
    other = store.embedder.embed_documents(["Zanzibar Shipping"])[0]
    with store.backend.write() as cur:
        cur.execute("UPDATE terms SET vector = ? WHERE norm = 'mike jones'", (np.asarray(other, "<f4").tobytes(),))
    assert [r.t1 for r in store.read(t1="Jones")] == ["Mike Jones"]  # the index built before is kept ...
    store.fuzzy_index = "faiss"
    assert store._terms.index is None
    assert store.read(t1="Jones") == []  # ... until it is rebuilt from the stored vectors
    assert store.read(t1="Mike Jones")


def test_fuzzy_k_uses_several_alternatives(tmp_path, emb):
    s = TripletStore(tmp_path / "m.db", embedder=emb, threshold=0.5)
    s.write_many([("red apple", "is", "fruit"), ("green apple", "is", "fruit")])
    assert len(s.read(t1="apple")) == 1
    assert len(s.read(t1="apple", fuzzy_k=2)) == 2


def test_search_free_text_over_all_fields(store):
    hits = store.search("Berlin", k=10)
    assert triples(hits) == sorted([FACTS[2], FACTS[3]])
    assert all(h.score == pytest.approx(1.0) for h in hits)
    assert store.search("Hardy", k=3)[0].t1 == "Tom Hardy"


# ------------------------------------------------------------------------------------------------ writes
def test_writes_are_idempotent_without_key(store):
    before = store.count()
    rec = store.write(FACTS[0])
    assert store.count() == before and rec.triplet == Triplet(*FACTS[0])


def test_write_returns_record_with_key_and_payload(store):
    rec = store.write(("Ann", "likes", "tea"), key="k1", payload={"source": "chat", "turn": 3})
    assert rec.key == "k1" and rec.payload == {"source": "chat", "turn": 3} and rec.current
    assert store.get("k1").payload == {"source": "chat", "turn": 3}


def test_update_by_key_keeps_the_previous_version(store):
    store.write(("Ann", "likes", "tea"), key="pref", valid_from=100)
    store.update("pref", ("Ann", "likes", "coffee"), valid_from=200)
    assert store.get("pref").t3 == "coffee"
    assert store.get("pref", as_of=150).t3 == "tea"
    versions = [r for r in store.records(history=True) if r.key == "pref"]
    assert [(r.t3, r.valid_from, r.valid_to) for r in versions] == [("tea", 100, 200), ("coffee", 200, None)]
    with pytest.raises(KeyError):
        store.update("missing", ("a", "b", "c"))


def test_soft_delete_ends_validity_hard_delete_erases(store):
    store.write(("Ann", "likes", "tea"), key="a", valid_from=100)
    assert store.delete("a", at=300) == 1
    assert store.get("a") is None and store.read(t1="Ann") == []
    assert store.read(t1="Ann", as_of=200)[0].t3 == "tea"
    assert store.delete("a", hard=True) == 1
    assert store.read(t1="Ann", as_of=200) == []
    assert store.delete("never-there") == 0
    assert store.delete(triplet=FACTS[4]) == 1 and store.read(t1="Tom Hardy") == []
    with pytest.raises(ValueError, match="exactly one"):
        store.delete()


# ------------------------------------------------------------------------------------------------ time
@pytest.mark.parametrize("kind", BACKENDS)
def test_single_valued_relation_supersedes_and_keeps_history(kind, tmp_path, emb):
    s = make_store(kind, tmp_path, emb, single_valued=["president"])
    s.write(("United States", "president", "Barack Obama"), valid_from=2009)
    s.write(("United States", "president", "Donald Trump"), valid_from=2017)
    s.write(("United States", "president", "Joe Biden"), valid_from=2021)
    s.write(("United States", "capital", "Washington"))  # not single-valued relation: untouched
    s.write(("United States", "capital", "D.C."))
    assert [r.t3 for r in s.read("United States", "president")] == ["Joe Biden"]
    assert [r.t3 for r in s.read("United States", "president", as_of=2012)] == ["Barack Obama"]
    assert [r.t3 for r in s.read("United States", "president", as_of=2017)] == ["Donald Trump"]
    assert s.read("United States", "president", as_of=1990) == []
    hist = s.history("United States", "president")
    assert [(r.t3, r.valid_from, r.valid_to) for r in hist] == [
        ("Barack Obama", 2009, 2017),
        ("Donald Trump", 2017, 2021),
        ("Joe Biden", 2021, None),
    ]
    assert len(s.read("United States", "capital")) == 2
    # backfilling an older fact ends where the next one starts, and nothing current changes
    s.write(("United States", "president", "George W. Bush"), valid_from=2001)
    assert [r.t3 for r in s.read("United States", "president", as_of=2005)] == ["George W. Bush"]
    assert s.history("United States", "president")[0].valid_to == 2009
    assert [r.t3 for r in s.read("United States", "president")] == ["Joe Biden"]
    assert len(s.records(history=True)) == 6  # nothing was deleted
    s.close()


def test_single_valued_per_call_and_persisted_marks(tmp_path, emb):
    path = tmp_path / "m.db"
    s = TripletStore(path, embedder=emb)
    s.write(("Ann", "mood", "happy"), valid_from=1)
    s.write(("Ann", "mood", "sad"), valid_from=2, single_valued=True)
    assert [r.t3 for r in s.read("Ann", "mood")] == ["sad"]
    s.mark_single_valued("Status")
    s.close()
    s = TripletStore(path, embedder=emb)
    assert "status" in s.single_valued
    s.write(("Ann", "status", "online"), valid_from=1)
    s.write(("Ann", "status", "away"), valid_from=2)
    assert [r.t3 for r in s.read("Ann", "status")] == ["away"]


# ------------------------------------------------------------------------------------------------ namespaces
def test_namespaces_isolate_and_prefix_reads_span(store):
    store.write(("Ann", "likes", "tea"), namespace=("users", "ann"))
    store.write(("Bob", "likes", "tea"), namespace=("users", "bob"))
    assert store.read(t3="tea") == []  # default namespace () is separate
    assert [r.t1 for r in store.read(t3="tea", namespace=("users", "ann"))] == ["Ann"]
    assert sorted(r.t1 for r in store.read(t3="tea", namespace=("users",), prefix=True)) == ["Ann", "Bob"]
    assert store.namespaces(prefix=("users",)) == [("users", "ann"), ("users", "bob")]
    assert store.count(namespace=("users",)) == 2
    assert store.read(t3="tea", namespace=("use",), prefix=True) == []  # label prefix is not a namespace prefix
    with pytest.raises(ValueError):
        store.write(("a", "b", "c"), namespace=("bad\x1flabel",))


# ------------------------------------------------------------------------------------------------ persistence
def test_reopened_sqlite_file_keeps_everything(tmp_path, emb):
    path = tmp_path / "m.db"
    s = TripletStore(path, embedder=emb)
    s.write_many(FACTS)
    s.close()
    s = TripletStore(path, embedder=emb)
    assert triples(s.read(t1="Jones")) == [FACTS[0]]
    s.close()
    with pytest.raises(ValueError, match="dimensional"):
        TripletStore(path, embedder=HashingEmbedder(dim=64)).write(("x", "y", "z"))


@pytest.mark.skipif(pg_skip_reason() is not None, reason=str(pg_skip_reason()))
def test_reopened_postgres_schema_keeps_everything(emb):
    url = get_pg().url
    s = TripletStore(PostgresBackend(url, schema="reopen_test"), embedder=emb)
    s.backend.drop_schema()
    s.close()
    s = TripletStore(PostgresBackend(url, schema="reopen_test"), embedder=emb)
    s.write_many(FACTS)
    s.close()
    s = TripletStore(PostgresBackend(url, schema="reopen_test"), embedder=emb)
    assert triples(s.read(t1="Jones")) == [FACTS[0]]
    assert triples(s.read(t2="works at")) == sorted([FACTS[1], FACTS[4]])
    s.backend.drop_schema()
    s.close()


def test_url_opens_postgres_and_path_opens_sqlite(tmp_path, emb):
    s = TripletStore(tmp_path / "x.db", embedder=emb)
    assert isinstance(s.backend, SQLiteBackend)
    s.close()
    if pg_skip_reason() is None:
        s = TripletStore(get_pg().url, embedder=emb)
        assert isinstance(s.backend, PostgresBackend)
        s.close()


# ------------------------------------------------------------------------------------------------ bad input
def test_bad_input_raises_with_a_fix(tmp_path, emb):
    s = TripletStore(":memory:", embedder=emb)
    with pytest.raises(ValueError, match="empty"):
        s.write(("a", " ", "c"))
    with pytest.raises(TypeError):
        s.write(("a", 1, "c"))
    with pytest.raises(ValueError, match="subject"):
        s.write({"s": "a"})
    with pytest.raises(TypeError, match="JSON"):
        s.write(("a", "b", "c"), payload={"x": object()})
    with pytest.raises(ValueError, match="valid_to"):
        s.write(("a", "b", "c"), valid_from=10, valid_to=5)
    with pytest.raises(ValueError, match="threshold"):
        TripletStore(":memory:", embedder=emb, threshold=1.5)
    with pytest.raises(ValueError, match="fuzzy_index"):
        TripletStore(":memory:", embedder=emb, fuzzy_index="lsh")
    with pytest.raises(TypeError, match="bits"):
        TripletStore(":memory:", embedder=emb, bits=12)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="embed_documents"):
        TripletStore(":memory:", embedder=object())
    with pytest.raises(TypeError, match="backend"):
        TripletStore(42)  # type: ignore[arg-type]


def test_write_many_is_one_transaction(tmp_path, emb):
    s = TripletStore(tmp_path / "m.db", embedder=emb)
    with pytest.raises(ValueError):
        s.write_many([("a", "b", "c"), TripletWrite(("d", "e", "f"), valid_from=5, valid_to=1)])
    assert s.count() == 0
    s.write_many([TripletWrite(("a", "b", "c"), key="k"), ("d", "e", "f")])
    assert s.count() == 2


# ------------------------------------------------------------------------------------------------ real model
@pytest.mark.slow
def test_fuzzy_lookup_with_the_real_minilm_embedder(tmp_path, real_embedder):
    s = TripletStore(tmp_path / "m.db", embedder=real_embedder)
    s.write_many(
        [
            ("United States", "president", "Joe Biden"),
            ("Apple", "founded by", "Steve Jobs"),
            ("Mike Jones", "CEO of", "Acme Corp"),
        ]
    )
    assert [r.t3 for r in s.read(t1="USA", t2="president")] == ["Joe Biden"]
    assert [r.t3 for r in s.read(t1="Apple Inc.", t2="was founded by")] == ["Steve Jobs"]
    assert [r.t1 for r in s.read(t2="chief executive officer of", t3="Acme Corp")] == ["Mike Jones"]
    assert s.read(t1="Microsoft") == []  # cos(Apple, Microsoft) ~ 0.49 < 0.7
