"""The in-memory term index behind the triplet store's fuzzy lookup: an exact scan by default, high recall with
faiss, fed only committed terms, and kept in step with writes by other store objects and other processes on the
same SQLite file or PostgreSQL schema."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from _triplet_fixtures import BACKENDS, get_pg, make_backend, pg_skip_reason

from fragrel_integrations.core.triplets import PostgresBackend, SQLiteBackend, TripletStore
from fragrel_integrations.core.triplets.term_index import TermIndex
from fragrel_integrations.testing import HashingEmbedder

REPO = Path(__file__).resolve().parent.parent


class TableEmbedder:
    """Fixed vectors for named terms; anything else gets a vector of its own from a seeded hash."""

    def __init__(self, table: dict[str, np.ndarray], dim: int) -> None:
        self.table, self.dim = table, dim

    def _one(self, text: str) -> np.ndarray:
        if text in self.table:
            return self.table[text]
        return HashingEmbedder(dim=self.dim, seed=9).embed_query(text)

    def embed_documents(self, texts):
        return np.stack([self._one(t) for t in texts])

    def embed_query(self, text):
        return self._one(text)


def unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v, axis=-1, keepdims=True)).astype(np.float32)


def clustered(n: int, dim: int, seed: int) -> np.ndarray:
    """Embedding-like vectors: a shared direction, one of n/50 cluster centres, and noise (cosines ~0.25-0.55)."""
    rng = np.random.default_rng(seed)
    common = unit(rng.standard_normal(dim))
    centres = unit(rng.standard_normal((max(1, n // 50), dim)))
    noise = unit(rng.standard_normal((n, dim)))
    return unit(0.5 * common + 0.55 * centres[rng.integers(0, centres.shape[0], n)] + 0.67 * noise)


def near(rng: np.random.Generator, v: np.ndarray, cos: float) -> np.ndarray:
    r = rng.standard_normal(v.shape[0]).astype(np.float32)
    r -= (r @ v) * v
    return unit(cos * v + np.sqrt(1 - cos**2) * unit(r))


# ------------------------------------------------------------------------------------------ TermIndex alone
@pytest.mark.parametrize("kind", ["exact", "faiss"])
def test_the_default_index_and_a_small_faiss_one_are_an_exact_scan(kind):
    vecs = clustered(3000, 32, seed=1)
    index = TermIndex(32, kind=kind)
    index.add(np.arange(1, 3001), vecs)
    assert index.lists == 0 and len(index) == 3000
    rng = np.random.default_rng(2)
    for j in rng.choice(3000, 20, replace=False):
        q = near(rng, vecs[j], 0.8)
        ids, sims = index.search(q, 0.5)
        exact = vecs @ q
        want = np.flatnonzero(exact >= 0.5)
        assert sorted(ids.tolist()) == sorted((want + 1).tolist())
        assert np.all(np.diff(sims) <= 0)
        assert int(ids[0]) == int(np.argmax(exact)) + 1


def test_the_faiss_index_finds_the_exact_best_term():
    n, dim = 32_000, 384
    vecs = clustered(n, dim, seed=3)
    index = TermIndex(dim, kind="faiss", train_at=8_000)
    for s in range(0, n, 4_000):  # reaches train_at (sqrt(8000) lists), then is retrained when 4 times as big
        index.add(np.arange(s + 1, min(n, s + 4_000) + 1), vecs[s : s + 4_000])
        assert index.lists == (0 if s + 4_000 < 8_000 else 89 if s + 4_000 < 32_000 else 179)
    assert len(index) == n and index.max_id == n
    rng = np.random.default_rng(4)
    hits = 0
    queries = rng.choice(n, 200, replace=False)
    for j in queries:
        q = near(rng, vecs[j], 0.8)
        ids, _ = index.search(q, 0.7)
        hits += bool(ids.size) and int(ids[0]) == int(np.argmax(vecs @ q)) + 1
    assert hits / len(queries) >= 0.99


def test_distant_queries_widen_the_probe_and_close_ones_do_not():
    n, dim = 20_000, 128
    vecs = clustered(n, dim, seed=5)
    narrow = TermIndex(dim, kind="faiss", train_at=5_000, min_probe=2, probe_share=0.001, widen=1)
    narrow.add(np.arange(1, n + 1), vecs)
    wide = TermIndex(dim, kind="faiss", train_at=5_000, min_probe=2, probe_share=0.001, widen=8, widen_gap=0.4)
    wide.add(np.arange(1, n + 1), vecs)
    rng = np.random.default_rng(6)
    hits = {0.97: [0, 0], 0.72: [0, 0]}
    for j in rng.choice(n, 150, replace=False):
        for cos, count in hits.items():
            q = near(rng, vecs[j], cos)
            best = int(np.argmax(vecs @ q)) + 1
            (got_narrow, sims), got_wide = narrow.search(q, 0.5), wide.search(q, 0.5)[0]
            count[0] += bool(got_narrow.size) and int(got_narrow[0]) == best
            count[1] += bool(got_wide.size) and int(got_wide[0]) == best
            if sims.size and sims[0] >= 0.9:  # close enough in the first lists: same search, same answer
                assert got_narrow.tolist() == got_wide.tolist()
    assert hits[0.97][1] >= hits[0.97][0] and hits[0.72][1] >= hits[0.72][0]
    assert hits[0.72][1] > hits[0.72][0]  # distant queries: the wider scan finds more best terms


def test_index_refuses_ids_that_do_not_grow_and_bad_settings():
    index = TermIndex(4)
    index.reserve(1000)  # one allocation for a bulk load of known size
    assert index.nbytes == 1000 * (4 * 4 + 8)
    index.add([1, 2], unit(np.eye(4)[:2]))
    assert index.ids().tolist() == [1, 2] and index.search(unit(np.eye(4)[1]), 0.9)[0].tolist() == [2]
    with pytest.raises(ValueError, match="term ids must grow"):
        index.add([2], unit(np.eye(4)[2:3]))
    with pytest.raises(ValueError, match="min_probe"):
        TermIndex(4, min_probe=0)
    with pytest.raises(ValueError, match="probe_share"):
        TermIndex(4, probe_share=0)
    with pytest.raises(ValueError, match="lists_factor"):
        TermIndex(4, lists_factor=0)
    with pytest.raises(ValueError, match="widen_gap"):
        TermIndex(4, widen_gap=2)
    with pytest.raises(ValueError, match="margin"):
        TermIndex(4, margin=1)
    with pytest.raises(ValueError, match="widen"):
        TermIndex(4, widen=0)
    with pytest.raises(ValueError, match=r"fuzzy_index must be one of \('exact', 'faiss'\), got 'database'"):
        TripletStore(":memory:", embedder=HashingEmbedder(dim=8), fuzzy_index="database")
    store = TripletStore(":memory:", embedder=HashingEmbedder(dim=8))
    with pytest.raises(ValueError, match="fuzzy_index"):
        store.fuzzy_index = "memory"


def test_faiss_without_faiss_installed_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(ImportError, match=r"fragrel-integrations\[faiss\]"):
        TripletStore(":memory:", embedder=HashingEmbedder(dim=8), fuzzy_index="faiss")
    assert TripletStore(":memory:", embedder=HashingEmbedder(dim=8)).fuzzy_index == "exact"


# ------------------------------------------------------------------------------------------ through the store
FACTS = [
    ("Mike Jones", "works at", "Acme Corp"),
    ("Sara Lee", "lives in", "Berlin"),
    ("Acme Corp", "based in", "Berlin"),
]


@pytest.mark.parametrize("kind", BACKENDS)
def test_the_exact_and_the_faiss_index_read_the_same(kind, tmp_path):
    backend = make_backend(kind, tmp_path)
    mem = TripletStore(backend, embedder=HashingEmbedder(dim=128, seed=3))
    mem.write_many(FACTS)
    other = SQLiteBackend(backend.path) if kind == "sqlite" else PostgresBackend(get_pg().url, schema=backend.schema)
    db = TripletStore(other, embedder=HashingEmbedder(dim=128, seed=3), fuzzy_index="faiss")
    db._terms.index_options = {"train_at": 4, "min_probe": 2}  # a faiss index over these few terms
    for query in [("Jones", None, None), (None, "works", None), (None, None, "Acme"), ("Sara", "lives in", None)]:
        got_mem, got_db = mem.read(*query), db.read(*query)
        assert got_mem, query
        assert [(r.triplet, r.matches) for r in got_mem] == [(r.triplet, r.matches) for r in got_db]
    assert [r.triplet for r in mem.search("Jones")] == [r.triplet for r in db.search("Jones")]
    assert db._terms.index.lists == 2 and mem._terms.index.lists == 0
    db.close()
    mem.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_term_written_through_another_store_object_is_found_by_the_next_fuzzy_read(kind, tmp_path):
    """Two store objects on one database (as two processes would have): the reader's index catches up."""
    backend = make_backend(kind, tmp_path)
    reader = TripletStore(backend, embedder=HashingEmbedder(dim=128, seed=3))  # opened while empty
    other = SQLiteBackend(backend.path) if kind == "sqlite" else PostgresBackend(get_pg().url, schema=backend.schema)
    writer = TripletStore(other, embedder=HashingEmbedder(dim=128, seed=3))
    assert reader.read(t1="Jones") == []
    writer.write(("Mike Jones", "works at", "Acme Corp"))
    assert [r.t1 for r in reader.read(t1="Jones")] == ["Mike Jones"]  # index built from the database
    writer.write_many([("Sara Lee", "lives in", "Berlin"), ("Tom Hardy", "acts in", "Bronson")])
    assert [r.t1 for r in reader.read(t1="Hardy")] == ["Tom Hardy"]  # only the new terms were read
    assert len(reader._terms.index) == reader.term_count() == 9
    writer.close()
    reader.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_rolled_back_write_never_reaches_the_index(kind, tmp_path):
    store = TripletStore(make_backend(kind, tmp_path), embedder=HashingEmbedder(dim=128, seed=3))
    store.write_many(FACTS)
    assert store.read(t1="Jones")  # the index is built
    original = store._writer.write_one

    def failing(cur, *args, **kwargs):
        original(cur, *args, **kwargs)
        raise RuntimeError("killed mid-batch")

    store._writer.write_one = failing
    with pytest.raises(RuntimeError, match="mid-batch"):
        store.write_many([("Tom Hardy", "acts in", "Bronson"), ("Ann Bell", "acts in", "Bronson")])
    del store._writer.write_one
    assert store.read(t1="Hardy") == [] and store.read(t1="Tom Hardy", fuzzy=False) == []
    ids = store._terms.index.search(store._terms.embed(["Tom Hardy"])[0], 0.99)[0]
    assert ids.size == 0  # the terms of the rolled-back batch are nowhere in the index
    store.write(("Tom Hardy", "acts in", "Bronson"))  # committed: the index learns it (at the latest on the
    assert [r.t1 for r in store.read(t1="Hardy")] == ["Tom Hardy"]  # next lookup, after an id gap on PostgreSQL)
    assert len(store._terms.index) == store.term_count()
    store.close()


def test_fuzzy_lookup_skips_close_terms_outside_the_field_or_namespace(tmp_path):
    rng = np.random.default_rng(5)
    base = unit(rng.standard_normal(64))
    table = {"query": base}
    for i in range(40):  # 40 close terms used elsewhere, closer than the one that qualifies
        table[f"near {i}"] = near(rng, base, 0.95 - i * 0.001)
    table["target"] = near(rng, base, 0.8)
    store = TripletStore(tmp_path / "m.db", embedder=TableEmbedder(table, 64))
    store.write_many([(f"near {i}", "rel", "x") for i in range(20)], namespace="other")
    store.write_many([("y", "rel", f"near {i}") for i in range(20, 40)])
    store.write(("target", "rel", "z"))
    got = store.read(t1="query")
    assert [r.t1 for r in got] == ["target"]
    assert got[0].matches[0].similarity == pytest.approx(0.8, abs=1e-5)
    assert [r.t1 for r in store.read(t1="query", namespace="other")] == ["near 0"]
    store.close()


CHILD = """
import sys
from fragrel_integrations.core.triplets import PostgresBackend, TripletStore
from fragrel_integrations.testing import HashingEmbedder
store = TripletStore(PostgresBackend(sys.argv[1], schema=sys.argv[2]), embedder=HashingEmbedder(dim=128, seed=3))
for line in sys.stdin:
    if line.startswith("write "):
        store.write((line[6:].strip(), "works at", "Acme Corp"))
        print("done", flush=True)
    else:
        print("|".join(r.t1 for r in store.read(t1=line.strip())), flush=True)
"""


def test_two_processes_on_one_postgres_see_each_others_terms_fuzzily(tmp_path):
    if pg_skip_reason():
        pytest.skip(pg_skip_reason())
    schema = "two_procs"
    url = get_pg().url
    PostgresBackend(url, schema=schema).drop_schema()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(CHILD), url, schema],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]

    def ask(proc: subprocess.Popen, line: str) -> str:
        proc.stdin.write(line + "\n")
        proc.stdin.flush()
        return proc.stdout.readline().strip()

    try:
        a, b = procs
        assert ask(a, "write Mike Jones") == "done"
        assert ask(b, "Jones") == "Mike Jones"  # b builds its index from the server
        assert ask(b, "write Sara Lee") == "done"
        assert ask(a, "Lee") == "Sara Lee"  # a reads b's new term on its next lookup
        assert ask(a, "write Tom Hardy") == "done"
        assert ask(b, "Hardy") == "Tom Hardy"
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(timeout=60)
    assert [p.returncode for p in procs] == [0, 0]
    PostgresBackend(url, schema=schema).drop_schema()
