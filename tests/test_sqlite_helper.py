"""The one SQLite opener (fragrel_integrations._sqlite.connect) the stores share."""

import sqlite3
import threading

import pytest

from fragrel_integrations._sqlite import connect


def test_read_only_opens_odd_file_names_and_refuses_writes(tmp_path):
    path = tmp_path / "a?b#c%20.sqlite"
    with connect(path) as conn:
        conn.execute("CREATE TABLE t (x)")
        conn.execute("INSERT INTO t VALUES (1)")
    conn.close()
    ro = connect(path, read_only=True)
    try:
        assert ro.execute("SELECT x FROM t").fetchall() == [(1,)]
        with pytest.raises(sqlite3.OperationalError):
            ro.execute("INSERT INTO t VALUES (2)")
    finally:
        ro.close()


def test_read_only_never_creates_a_file(tmp_path):
    with pytest.raises(sqlite3.OperationalError):
        connect(tmp_path / "missing.sqlite", read_only=True)
    assert not (tmp_path / "missing.sqlite").exists()


def test_wal_and_threads(tmp_path):
    conn = connect(tmp_path / "w.sqlite", wal=True, threads=True)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    out = []
    t = threading.Thread(target=lambda: out.append(conn.execute("SELECT 2").fetchone()[0]))
    t.start()
    t.join()
    assert out == [2]
    conn.close()
    mem = connect(":memory:", wal=True)  # no WAL for an in-memory database, and no error
    assert mem.execute("PRAGMA journal_mode").fetchone()[0] == "memory"
    mem.close()
