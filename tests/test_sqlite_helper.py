"""The one SQLite opener (fragrel_integrations._sqlite.connect) the stores share."""

import sqlite3
import threading

import pytest

from fragrel_integrations._sqlite import SavedFormat, connect


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


# ------------------------------------------------------------------------------------------ SavedFormat (issue 37)
NOTES = SavedFormat("notes", 2, "notes file", ("CREATE TABLE IF NOT EXISTS notes (text TEXT)",))


def _fill(conn):
    conn.execute("INSERT INTO notes VALUES ('hi')")


def test_a_saved_file_records_format_version_and_what_built_it(tmp_path):
    path = NOTES.write(tmp_path / "sub" / "n.db", {"owner": "ann"}, built_by={"model": "m"}, fill=_fill)
    header = NOTES.header(path)
    assert (header["format"], header["version"], header["owner"]) == ("notes", 2, "ann")
    assert header["built_by"]["model"] == "m" and header["built_by"]["package"].startswith("fragrel-integrations")
    assert NOTES.read(path, lambda conn, head: (conn.execute("SELECT text FROM notes").fetchall(), head["owner"])) == (
        [("hi",)],
        "ann",
    )
    assert NOTES.owns(path) and not SavedFormat("other", 1, "other file").owns(path)


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    path = NOTES.write(tmp_path / "n.db", {"owner": "ann"}, fill=_fill)

    def broken(conn):
        _fill(conn)
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        NOTES.write(path, {"owner": "bob"}, fill=broken)
    assert NOTES.header(path)["owner"] == "ann" and sorted(p.name for p in tmp_path.iterdir()) == ["n.db"]


def test_the_one_damage_rule(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("my notes " * 50)
    other = tmp_path / "app.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    conn.close()
    for path in (text, other):
        before = path.read_bytes()
        with pytest.raises(ValueError, match=rf"{path.name} is not a notes file"):
            NOTES.header(path)
        with pytest.raises(ValueError, match=rf"refusing to overwrite .*{path.name}"):
            NOTES.write(path, {})
        with pytest.raises(ValueError, match=path.name):
            NOTES.open(path)
        assert path.read_bytes() == before
    with pytest.raises(FileNotFoundError, match="no such notes file"):
        NOTES.header(tmp_path / "missing.db")
    with pytest.raises(ValueError, match="is a directory"):
        NOTES.write(tmp_path, {})
    newer = SavedFormat("notes", 3, "notes file").write(tmp_path / "v3.db", {})
    with pytest.raises(ValueError, match=r"notes file of version 3; .* reads version 2: rebuild it"):
        NOTES.header(newer)
    path = NOTES.write(tmp_path / "n.db", {}, fill=_fill)

    def check(conn, _):
        raise ValueError("a bad note")

    with pytest.raises(ValueError, match=r"n\.db is a damaged notes file \(a bad note\): delete it or save it again"):
        NOTES.read(path, check)
    NOTES.write(path, {})  # a file of the format, damaged or not, may be replaced


def test_a_live_store_is_stamped_once_and_checked_on_every_open(tmp_path):
    path = tmp_path / "live.db"
    path.touch()  # an empty file is a new database
    NOTES.open(path).close()
    conn = NOTES.open(path)
    assert NOTES.header(path)["format"] == "notes" and conn.execute("SELECT COUNT(*) FROM header").fetchone()[0] == 3
    conn.close()
    with pytest.raises(ValueError, match="version 2"):
        SavedFormat("notes", 1, "notes file").open(path)
    memory = NOTES.open(":memory:")
    assert memory.execute("SELECT COUNT(*) FROM notes").fetchone()[0] == 0
    memory.close()


def _earlier_layout(path, table, value):
    """A file as the layout before the shared header wrote it: a key/value table whose 'format' row names it."""
    conn = sqlite3.connect(path)
    conn.execute(f"CREATE TABLE {table} (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute(f"INSERT INTO {table} VALUES ('format', ?)", (value,))
    conn.commit()
    conn.close()
    return path


def test_a_cache_of_an_earlier_layout_is_rebuilt_not_ignored(tmp_path, caplog):
    """The CLI's caches written before the shared header are replaced (one warning), never refused for ever."""
    import numpy as np

    from fragrel_integrations.core.saved_index import is_index_file
    from fragrel_integrations.core.staged import WindowVectorFile

    vectors = _earlier_layout(tmp_path / "book.vectors", "header", "fragrel-window-vectors")
    store = WindowVectorFile(vectors, key="k", n_fragments=2, rebuild=True)
    assert "earlier layout" in caplog.text
    store.add({1: np.ones((1, 3), dtype=np.float32)})
    assert list(WindowVectorFile(vectors, key="k", n_fragments=2).read()) == [1]
    with pytest.raises(ValueError, match="earlier layout: rebuild it"):
        WindowVectorFile(_earlier_layout(tmp_path / "b.vectors", "header", "fragrel-window-vectors"), key="k",
                         n_fragments=2)  # fmt: skip
    index = _earlier_layout(tmp_path / "book.fragrel", "fragrel_index", "fragrel-index")
    assert is_index_file(index)
    other = _earlier_layout(tmp_path / "other.db", "fragrel_index", "something-else")
    assert not is_index_file(other)
    with pytest.raises(ValueError, match="not a FragRel vector cache"):
        WindowVectorFile(other, key="k", n_fragments=2, rebuild=True)  # another database is never replaced
