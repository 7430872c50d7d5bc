"""Transactions on both backends: concurrent writer threads (and processes) lose nothing and duplicate nothing;
a writer process killed in the middle of a transaction loses nothing committed and leaves nothing half-written."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from _triplet_fixtures import BACKENDS, get_pg, make_backend, pg_skip_reason

from fragrel_integrations.core.triplets import PostgresBackend, SQLiteBackend, TripletStore
from fragrel_integrations.testing import HashingEmbedder

REPO = Path(__file__).resolve().parent.parent


def emb():
    return HashingEmbedder(dim=64, seed=1)


def check_consistent(store: TripletStore) -> None:
    """Every term once, each with its embedding; every triplet's terms exist."""
    with store.backend.read() as cur:
        dup = cur.execute("SELECT norm FROM terms GROUP BY norm HAVING COUNT(*) > 1").fetchall()
        assert dup == []
        n_terms = cur.execute("SELECT COUNT(*) FROM terms").fetchone()[0]
        dim = int(cur.execute("SELECT value FROM meta WHERE name = 'dim'").fetchone()[0])
        sizes = cur.execute("SELECT COUNT(*) FROM terms WHERE LENGTH(vector) = ?", (4 * dim,)).fetchone()[0]
        assert sizes == n_terms
        orphans = cur.execute(
            "SELECT COUNT(*) FROM triplets r WHERE NOT EXISTS (SELECT 1 FROM terms t WHERE t.id = r.t1_id) "
            "OR NOT EXISTS (SELECT 1 FROM terms t WHERE t.id = r.t3_id)"
        ).fetchone()[0]
        assert orphans == 0


@pytest.mark.parametrize("kind", BACKENDS)
def test_concurrent_writer_threads_lose_and_duplicate_nothing(kind, tmp_path):
    backend = make_backend(kind, tmp_path)
    store = TripletStore(backend, embedder=emb())
    # a second store object (own connection) on the same database, as another component would open it
    other = TripletStore(
        SQLiteBackend(backend.path) if kind == "sqlite" else PostgresBackend(backend.conninfo, schema=backend.schema),
        embedder=emb(),
    )
    errors: list[BaseException] = []

    def writer(s: TripletStore, w: int) -> None:
        try:
            for i in range(30):
                # shared terms ("shared topic", "mentions") race on first insertion
                s.write((f"writer {w} item {i}", "mentions", "shared topic"))
                s.write((f"writer {w} item {i}", "has index", f"index {i}"), key=f"w{w}-{i}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(store if w % 2 else other, w)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert store.count() == 6 * 30 * 2
    assert len(store.read(t2="mentions", t3="shared topic")) == 180
    assert store.get("w3-17").t3 == "index 17"
    check_consistent(store)
    other.close()
    store.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_concurrent_single_valued_writes_leave_one_consistent_history(kind, tmp_path):
    store = TripletStore(make_backend(kind, tmp_path), embedder=emb(), single_valued=["ceo"])
    order = [5, 2, 7, 0, 3, 6, 1, 4]

    def writer(i: int) -> None:
        store.write(("Acme", "CEO", f"person {i}"), valid_from=1000 + i)

    threads = [threading.Thread(target=writer, args=(i,)) for i in order]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    hist = store.history("Acme", "CEO")
    assert [r.t3 for r in hist] == [f"person {i}" for i in range(8)]
    for a, b in itertools.pairwise(hist):
        assert a.valid_to == b.valid_from  # a chain: no gap, no overlap
    assert hist[-1].valid_to is None
    assert [r.t3 for r in store.read("Acme", "CEO")] == ["person 7"]
    store.close()


def test_two_processes_write_one_sqlite_file(tmp_path):
    path = tmp_path / "shared.db"
    TripletStore(path, embedder=emb()).close()
    code = textwrap.dedent(
        f"""
        import sys
        from fragrel_integrations.core.triplets import TripletStore
        from fragrel_integrations.testing import HashingEmbedder
        s = TripletStore({str(path)!r}, embedder=HashingEmbedder(dim=64, seed=1))
        for i in range(40):
            s.write((f"proc {{sys.argv[1]}} fact {{i}}", "about", "common object"))
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(p)], cwd=REPO) for p in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    store = TripletStore(path, embedder=emb())
    assert store.count() == 80
    check_consistent(store)


CHILD = """
import sys, time
from fragrel_integrations.core.triplets import PostgresBackend, SQLiteBackend, TripletStore
from fragrel_integrations.testing import HashingEmbedder

kind, target, schema, crash_batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
backend = SQLiteBackend(target) if kind == "sqlite" else PostgresBackend(target, schema=schema)
store = TripletStore(backend, embedder=HashingEmbedder(dim=64, seed=1), single_valued=["counter"])
original = store._writer.write_one
state = {"batch": 0, "n": 0}

def write_one(cur, *args, **kwargs):
    rec = original(cur, *args, **kwargs)
    state["n"] += 1
    if state["batch"] == crash_batch and state["n"] == 5:
        print(f"IN_TX {state['batch']}", flush=True)
        time.sleep(120)  # killed here: inside the transaction, after 5 of its 10 rows
    return rec

store._writer.write_one = write_one
for b in range(crash_batch + 1):
    state["batch"], state["n"] = b, 0
    store.write_many(
        [(f"batch {b} subject {i}", "in batch", f"batch {b} object {i}") for i in range(9)]
        + [("state", "counter", f"value {b}")]
    )
    print(f"COMMITTED {b}", flush=True)
    if b == 0:
        store.read(t1="batch 0 subjects")  # builds this process's term index: later commits also feed it
    if b == 1:
        sys.stdin.readline()  # wait until the parent has opened its reader (no write lock held meanwhile)
"""


def start_writer(tmp_path: Path, kind: str, target: str, schema: str, crash_batch: int) -> subprocess.Popen:
    """A child process running :data:`CHILD` on the store at ``target``: it prints ``COMMITTED b`` after each
    batch, waits for a line on stdin after batch 1, and hangs inside batch ``crash_batch``'s transaction, after
    printing ``IN_TX`` (the test kills it there)."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    return subprocess.Popen(
        [sys.executable, str(script), kind, target, schema, str(crash_batch)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("kind", BACKENDS)
def test_killed_writer_loses_nothing_committed(kind, tmp_path):
    if kind == "postgres" and pg_skip_reason():
        pytest.skip(pg_skip_reason())
    schema = f"crash_{os.getpid()}"
    target = str(tmp_path / "crash.db") if kind == "sqlite" else get_pg().url
    crash_batch = 4
    proc = start_writer(tmp_path, kind, target, schema, crash_batch)
    lines = []
    reader = None  # another process's view (this one): its term index is built before the crash
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline().strip()
        if not line:
            break
        lines.append(line)
        if line == "COMMITTED 1":
            rb = SQLiteBackend(target) if kind == "sqlite" else PostgresBackend(target, schema=schema)
            reader = TripletStore(rb, embedder=emb())
            reader.read(t1="batch 1 subjects")  # fuzzy: builds the reader's index
            assert reader._terms.index is not None and len(reader._terms.index) >= 20
            proc.stdin.write("go\n")  # the writer goes on; the reader's index is fed by later reads
            proc.stdin.flush()
        if line.startswith("IN_TX"):
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait(timeout=30)
    assert lines == [f"COMMITTED {b}" for b in range(crash_batch)] + [f"IN_TX {crash_batch}"]
    assert proc.returncode == -signal.SIGKILL

    backend = SQLiteBackend(target) if kind == "sqlite" else PostgresBackend(target, schema=schema)
    store = TripletStore(backend, embedder=emb())
    for b in range(crash_batch):  # every committed batch is there, whole
        assert len(store.read(t1=f"batch {b} subject 3", t2="in batch")) == 1
        assert len(store.read(t2="in batch", t3=f"batch {b} object 8")) == 1
    assert store.count() == crash_batch * 9 + 1
    assert [r.t3 for r in store.read("state", "counter")] == [f"value {crash_batch - 1}"]
    assert store.read(t1=f"batch {crash_batch} subject 0", fuzzy=False) == []  # the killed batch left nothing
    with store.backend.read() as cur:
        assert (
            cur.execute("SELECT COUNT(*) FROM terms WHERE norm LIKE ?", (f"batch {crash_batch} %",)).fetchone()[0] == 0
        )
        if kind == "sqlite":
            assert cur.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    check_consistent(store)
    with store.backend.read() as cur:
        term_ids = sorted(int(r[0]) for r in cur.execute("SELECT id FROM terms").fetchall())
    for view in (reader, store):  # the index built before the crash and the one built on reopen
        view.read(t1=f"batch {crash_batch - 1} subjects")  # a fuzzy read brings the index up to the data
        assert view._terms.index.ids().tolist() == term_ids  # every committed term, nothing of the killed batch
        for b in range(crash_batch):  # committed terms are found through the index
            got = view._terms.index.search(view._terms.embed([f"batch {b} subject 3"])[0], 0.999)[0]
            assert got.size and set(got.tolist()) <= set(term_ids)
    reader.close()
    store.write(("after", "the", "crash"))  # the write lock was released
    assert store.read(t1="after")
    if kind == "postgres":
        store.backend.drop_schema()
    store.close()
