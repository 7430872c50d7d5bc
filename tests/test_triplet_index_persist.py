"""The term index's partition saved in the database: restored on open without k-means, kept in step by every
write in the write's own transaction, and never trusted when it is stale or damaged (then rebuilt and saved
again); a writer killed mid-batch leaves the data and the saved partition in agreement."""

from __future__ import annotations

import logging
import os
import signal

import numpy as np
import pytest
from _triplet_fixtures import BACKENDS, make_backend, pg_skip_reason
from test_triplet_durability import start_writer

from fragrel_integrations.core.triplets import PostgresBackend, SQLiteBackend, TripletStore, term_index
from fragrel_integrations.core.triplets.index_persist import check_saved, read_saved, read_terms
from fragrel_integrations.core.triplets.term_index import TermIndex
from fragrel_integrations.testing import HashingEmbedder

DIM = 64
SMALL = {"train_at": 60, "min_probe": 2}  # partition small stores (the default waits for 20,000 terms)


def emb() -> HashingEmbedder:
    return HashingEmbedder(dim=DIM, seed=1)  # the killed-writer child's embedder


def reopen(store: TripletStore) -> TripletStore:
    b = store.backend
    other = SQLiteBackend(b.path) if isinstance(b, SQLiteBackend) else PostgresBackend(b.conninfo, schema=b.schema)
    new = TripletStore(other, embedder=emb())
    new._terms.index_options = dict(SMALL)
    return new


def filled(kind: str, tmp_path, n: int = 150) -> TripletStore:
    store = TripletStore(make_backend(kind, tmp_path), embedder=emb())
    store._terms.index_options = dict(SMALL)
    store.write_many([(f"subject {i}", f"relation {i % 7}", f"object {i}") for i in range(n)])
    return store


def saved_state(store: TripletStore) -> tuple[int, int, int, int]:
    """(generation, change counter, rows in term_part, stored terms)."""
    with store.backend.read() as cur:
        gen, assigned = cur.execute("SELECT generation, assigned FROM term_index_state").fetchone()
        rows = cur.execute("SELECT COUNT(*) FROM term_part").fetchone()[0]
        terms = cur.execute("SELECT COUNT(*) FROM terms").fetchone()[0]
    return int(gen), int(assigned), int(rows), int(terms)


def sound(store: TripletStore) -> bool:
    with store.backend.read() as cur:
        saved, _ = read_saved(cur, DIM)
        if saved is None:
            return False
        _, vecs, parts = read_terms(cur, DIM)
        return check_saved(cur, saved, vecs, parts) is None and bool((parts >= 0).all())


# ------------------------------------------------------------------------------------------ TermIndex.restore
def test_restore_rebuilds_the_same_index_without_kmeans():
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((400, 32)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    built = TermIndex(32, train_at=100, min_probe=3)
    built.add(np.arange(1, 401), vecs)
    mean, cent = built.partition_state()
    ids, parts = built.assignments()
    order = np.argsort(ids)
    parts = parts[order].copy()
    parts[::5] = -1  # some terms without a saved partition: assigned on restore
    restored = TermIndex(32, train_at=100, min_probe=3)
    used = restored.restore(mean, cent, built.trained_n, ids[order], vecs, parts)
    assert (used >= 0).all() and restored.partitions == built.partitions and len(restored) == 400
    assert restored.max_id == 400 and restored.trained_n == built.trained_n
    assert np.array_equal(used, built.assignments()[1][order])  # the nearest centroid, as the build chose
    for q in vecs[::37]:
        assert np.array_equal(restored.search(q, 0.5)[0], built.search(q, 0.5)[0])


def test_restore_refuses_bad_input():
    cent = np.eye(4, dtype=np.float32)[:2]
    vecs = np.eye(4, dtype=np.float32)[:3]
    with pytest.raises(ValueError, match="ascending"):
        TermIndex(4).restore(np.zeros(4), cent, 3, np.array([1, 3, 2]), vecs, np.zeros(3))
    with pytest.raises(ValueError, match="partition numbers"):
        TermIndex(4).restore(np.zeros(4), cent, 3, np.array([1, 2, 3]), vecs, np.array([0, 1, 2]))
    full = TermIndex(4)
    full.add(np.array([1]), vecs[:1])
    with pytest.raises(ValueError, match="empty index"):
        full.restore(np.zeros(4), cent, 3, np.array([2, 3, 4]), vecs, np.zeros(3))


# ------------------------------------------------------------------------------------------ through the store
@pytest.mark.parametrize("kind", BACKENDS)
def test_the_partition_is_saved_and_restored_on_open(kind, tmp_path, monkeypatch):
    store = filled(kind, tmp_path)
    first = store.read(t1="subject 17x")  # builds the index (k-means) and saves its partition
    assert first and store._terms.index.partitions > 1
    gen, assigned, rows, terms = saved_state(store)
    assert gen == 1 and assigned == rows == terms == 150 * 2 + 7
    ids, parts = store._terms.index.assignments()
    built = dict(zip(ids.tolist(), parts.tolist(), strict=True))

    monkeypatch.setattr(term_index, "_kmeans", lambda *a, **k: pytest.fail("k-means ran: nothing was restored"))
    again = reopen(store)
    assert [r.triplet for r in again.read(t1="subject 17x")] == [r.triplet for r in first]
    ids2, parts2 = again._terms.index.assignments()
    assert dict(zip(ids2.tolist(), parts2.tolist(), strict=True)) == built
    assert saved_state(again)[0] == 1  # nothing needed saving
    again.close()
    store.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_every_write_assigns_its_new_terms_in_its_own_transaction(kind, tmp_path):
    store = filled(kind, tmp_path)
    store.read(t1="subject 3x")
    writer = reopen(store)  # never reads fuzzily: no index of its own, yet it keeps the saved one in step
    writer.write_many([(f"late {i}", "relation 1", f"late object {i}") for i in range(20)])
    assert writer._terms.index is None
    gen, assigned, rows, terms = saved_state(store)
    assert gen == 1 and assigned == rows == terms == 150 * 2 + 7 + 40
    original = writer._writer.write_one

    def failing(cur, *args, **kwargs):
        original(cur, *args, **kwargs)
        raise RuntimeError("killed mid-batch")

    writer._writer.write_one = failing
    with pytest.raises(RuntimeError, match="mid-batch"):
        writer.write_many([("doomed one", "relation 1", "doomed two")])
    assert saved_state(store)[1:] == (assigned, rows, terms)  # rolled back together with the terms
    assert sound(store)
    writer.close()
    store.close()


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("damage", ["checksum", "counter", "range", "assignments", "format"])
def test_a_stale_or_damaged_saved_partition_is_not_trusted(kind, damage, tmp_path, caplog):
    store = filled(kind, tmp_path)
    want = [r.triplet for r in store.read(t1="subject 42x")]
    assert want
    with store.backend.write() as cur:
        k = int(cur.execute("SELECT k FROM term_index_state").fetchone()[0])
        if damage == "checksum":  # one flipped byte in the centroids
            blob = bytearray(bytes(cur.execute("SELECT centroids FROM term_index_state").fetchone()[0]))
            blob[100] ^= 0x40
            cur.execute("UPDATE term_index_state SET centroids = ?", (bytes(blob),))
        elif damage == "counter":  # a row lost behind the change counter's back
            cur.execute("DELETE FROM term_part WHERE term_id = (SELECT MIN(term_id) FROM term_part)")
        elif damage == "range":
            cur.execute("UPDATE term_part SET part = ? WHERE term_id = (SELECT MAX(term_id) FROM term_part)", (k + 3,))
        elif damage == "assignments":  # every term moved to another partition
            cur.execute("UPDATE term_part SET part = (part + 1) - ((part + 1) / ?) * ?", (k, k))
        else:
            cur.execute("UPDATE term_index_state SET format = 99")
    assert not sound(store)
    again = reopen(store)
    with caplog.at_level(logging.WARNING, logger="fragrel_integrations.core.triplets.store"):
        assert [r.triplet for r in again.read(t1="subject 42x")] == want
    assert "not trusted" in caplog.text
    gen, assigned, rows, terms = saved_state(again)
    assert gen == 2 and assigned == rows == terms  # re-partitioned and saved again
    assert sound(again)
    again.close()
    store.close()


def test_an_unpartitioned_index_saves_nothing(tmp_path):
    store = filled("sqlite", tmp_path)
    store._terms.index_options = {**SMALL, "train_at": 10**6}  # one exact-scan partition: nothing worth saving
    assert store.read(t1="subject 5x")
    with store.backend.read() as cur:
        assert cur.execute("SELECT COUNT(*) FROM term_index_state").fetchone()[0] == 0
        assert cur.execute("SELECT COUNT(*) FROM term_part").fetchone()[0] == 0
    store.write(("one more", "relation 1", "fact"))  # no saved partition: writers assign nothing
    assert saved_state_or_none(store) is None
    store.close()


def saved_state_or_none(store: TripletStore):
    with store.backend.read() as cur:
        return cur.execute("SELECT generation FROM term_index_state").fetchone()


@pytest.mark.parametrize("kind", BACKENDS)
def test_terms_a_writer_left_unassigned_are_assigned_and_saved_on_open(kind, tmp_path, monkeypatch):
    store = filled(kind, tmp_path)
    store.read(t1="subject 9x")
    # as a writer of an older version would: terms stored with no partition row (and no counter change)
    with store.backend.write() as cur:
        top = int(cur.execute("SELECT MAX(term_id) FROM term_part").fetchone()[0])
        cur.execute("DELETE FROM term_part WHERE term_id > ?", (top - 12,))
        cur.execute("UPDATE term_index_state SET assigned = assigned - 12")
    monkeypatch.setattr(term_index, "_kmeans", lambda *a, **k: pytest.fail("k-means ran"))
    again = reopen(store)
    assert again.read(t1="subject 149x")  # among the unassigned terms: restored, assigned, found
    gen, assigned, rows, terms = saved_state(again)
    assert gen == 1 and assigned == rows == terms  # and their partitions saved
    assert sound(again)
    again.close()
    store.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_killed_writer_leaves_data_and_saved_partition_in_agreement(kind, tmp_path, monkeypatch):
    if kind == "postgres" and pg_skip_reason():
        pytest.skip(pg_skip_reason())
    store = filled(kind, tmp_path)
    store.read(t1="subject 1x")  # a saved partition exists before the child writes
    assert saved_state(store)[0] == 1
    b = store.backend
    target = b.path if kind == "sqlite" else b.conninfo
    schema = "" if kind == "sqlite" else b.schema
    crash_batch = 3
    proc = start_writer(tmp_path, kind, target, schema, crash_batch)
    lines = []
    while True:
        line = proc.stdout.readline().strip()
        if not line:
            break
        lines.append(line)
        if line == "COMMITTED 1":
            proc.stdin.write("go\n")
            proc.stdin.flush()
        if line.startswith("IN_TX"):  # inside the transaction: its terms and their partitions are written
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait(timeout=30)
    assert lines == [f"COMMITTED {b}" for b in range(crash_batch)] + [f"IN_TX {crash_batch}"]
    assert proc.returncode == -signal.SIGKILL
    monkeypatch.setattr(term_index, "_kmeans", lambda *a, **k: pytest.fail("k-means ran"))
    again = reopen(store)
    gen, assigned, rows, terms = saved_state(again)
    assert gen == 1 and assigned == rows == terms  # nothing of the killed batch, every committed term assigned
    assert sound(again)
    assert again.read(t1="batch 2 subject 4", t2="in batch")
    assert again.read(t1=f"batch {crash_batch} subject 0", fuzzy=False) == []
    with again.backend.read() as cur:
        term_ids = sorted(int(r[0]) for r in cur.execute("SELECT id FROM terms").fetchall())
    again.read(t1="batch 2 subjects")  # fuzzy: restores the saved partition (no k-means)
    assert again._terms.index.ids().tolist() == term_ids
    if kind == "postgres":
        again.backend.drop_schema()
    again.close()
    store.close()


# ------------------------------------------------------------------------------------------ damaged values (issue 25)
@pytest.mark.parametrize(
    ("table", "column", "value"),
    [
        ("term_index_state", "format", "'f'"),
        ("term_index_state", "generation", "'g'"),
        ("term_index_state", "dim", "'d'"),
        ("term_index_state", "k", "'k'"),
        ("term_index_state", "trained_n", "'n'"),
        ("term_index_state", "assigned", "'a'"),
        ("term_index_state", "checksum", "'c'"),
        ("term_index_state", "mean", "'not a blob'"),
        ("term_index_state", "centroids", "12"),
        ("term_part", "part", "'p'"),
    ],
)
def test_a_wrongly_typed_value_in_the_saved_term_index_is_a_logged_rebuild(table, column, value, tmp_path, caplog):
    store = filled("sqlite", tmp_path)
    want = [r.triplet for r in store.read(t1="subject 42x")]
    assert want and saved_state(store)[0] == 1
    where = " WHERE term_id = (SELECT MIN(term_id) FROM term_part)" if table == "term_part" else ""
    with store.backend.write() as cur:
        cur.execute(f"UPDATE {table} SET {column} = {value}{where}")
    writer = reopen(store)  # writes go on: their terms are stored, the damaged partition is left to the loader
    writer.write_many([(f"late {i}", "relation 1", f"late object {i}") for i in range(5)])
    assert writer.read(t1="late 3", fuzzy=False)
    again = reopen(store)
    with caplog.at_level(logging.WARNING):
        assert [r.triplet for r in again.read(t1="subject 42x")] == want
        assert again.read(t3="late object 3 !")  # fuzzy: the later terms are in the rebuilt index
    assert "not trusted" in caplog.text and str(store.backend.path) in caplog.text  # names the database
    _, assigned, rows, terms = saved_state(again)
    assert assigned == rows == terms  # re-partitioned and saved again, sound
    assert sound(again)
    for s in (writer, again, store):
        s.close()


@pytest.mark.parametrize("fuzzy_index", ["memory", "database"])
def test_a_damaged_term_vector_is_a_value_error_naming_the_database(fuzzy_index, tmp_path):
    store = filled("sqlite", tmp_path, n=20)
    with store.backend.write() as cur:
        cur.execute("UPDATE terms SET vector = ?", (b"\x00" * 10,))  # 10 bytes: not 64 float32 values
    again = reopen(store)
    again.fuzzy_index = fuzzy_index
    with pytest.raises(ValueError, match=r"terms\.vector of row id \d+ is damaged \(10 bytes, expected 64") as err:
        again.read(t1="subject 1x")
    assert str(store.backend.path) in str(err.value)
    assert again.read(t1="subject 1", fuzzy=False)  # exact reads do not need the vectors
    again.close()
    store.close()


# ------------------------------------------------------------------------------------------ embedder identity
def test_a_store_refuses_another_embedder_of_the_same_class_and_dimension(tmp_path):
    path = tmp_path / "facts.db"
    store = TripletStore(path, embedder=emb())
    store.write(("Ana", "likes", "green tea"))
    store.close()
    with pytest.raises(ValueError, match=r"facts\.db.*fingerprint.*open it with the embedder it was built with"):
        TripletStore(path, embedder=HashingEmbedder(dim=DIM, seed=2))  # same class, name and dimension
    windowed = emb()
    windowed.max_input_tokens = 32
    with pytest.raises(ValueError, match="reading None tokens per text, this one reads 32"):
        TripletStore(path, embedder=windowed)
    same = TripletStore(path, embedder=emb())
    assert [r.t3 for r in same.read("Ana", "likes")] == ["green tea"]
    assert [r.t3 for r in same.read("ana", "likes a lot")] == ["green tea"]  # fuzzy: the vectors are comparable
    # a store made before the identity was recorded adopts the embedder of its next write, then keeps it
    with same.backend.write() as cur:
        cur.execute("DELETE FROM meta WHERE name = 'embedder'")
    same.close()
    older = TripletStore(path, embedder=emb())
    older.write(("Bo", "likes", "coffee"))
    older.close()
    with pytest.raises(ValueError, match="fingerprint"):
        TripletStore(path, embedder=HashingEmbedder(dim=DIM, seed=2))
