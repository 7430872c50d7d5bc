"""SQLite files the one way this package does (stdlib ``sqlite3``): the opener, and every saved format's header,
atomic replace and damage rule.

A saved format is a :class:`SavedFormat` (its name, version, a noun for messages and its tables): every file of
one has a ``header`` table (``key``, ``value`` as JSON) holding ``format``, ``version`` and ``built_by`` (the
identity of what built it: this package's version, plus e.g. the embedder's identity), and any settings the
format adds. Snapshots (indexes, vector caches, trees, code indexes) are written whole to a temporary file in
the same folder and moved over the target in one step; live stores (the fragment store, the response cache,
the SCM memory stream) stamp the header into a new file on open.

The damage rule, the same for every format: a path that is a directory or not a regular file, a non-empty file
that is not a SQLite database, a database without this format's header or of another version, and a file whose
tables or values cannot be read back are each a ValueError naming the file. A file is written or replaced only
when it is absent, empty or its header names the format (a damaged file of the format included); anything
else is left unchanged (the CLI's vector cache, which rebuilds itself, also replaces a file that holds no SQLite
tables). The triplet store (whose tables may sit in any SQLite or PostgreSQL database) applies
the first half through :func:`check_file` and records its schema version in its own ``meta`` table.

>>> conn = connect(":memory:", threads=True)
>>> conn.execute("SELECT 1").fetchone()
(1,)
>>> conn.close()
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from ._validation import stored_json

__all__ = ["SQLITE_MAGIC", "SavedFormat", "check_file", "connect", "not_a_database"]

T = TypeVar("T")

#: The first 16 bytes of every SQLite database file.
SQLITE_MAGIC = b"SQLite format 3\x00"
_HEADER_TABLE = "CREATE TABLE IF NOT EXISTS header (key TEXT PRIMARY KEY, value TEXT NOT NULL)"


def connect(
    path: str | os.PathLike[str],
    *,
    read_only: bool = False,
    threads: bool = False,
    wal: bool = False,
    timeout: float = 5.0,
) -> sqlite3.Connection:
    """A connection to the SQLite file ``path`` (or ``":memory:"``).

    ``read_only`` opens an existing file with ``mode=ro`` (never creates or writes it; the path is quoted, so
    ``?``, ``#`` and ``%`` in a file name are safe); ``threads`` lets the connection be used from other threads
    (the caller serialises access with a lock); ``wal`` switches a file to write-ahead logging (readers do not
    block the writer); ``timeout`` is how long a write waits for another process's lock, in seconds.
    """
    if read_only:
        uri = f"file:{quote(str(Path(path).resolve()))}?mode=ro"
        return sqlite3.connect(uri, uri=True, timeout=timeout, check_same_thread=not threads)
    conn = sqlite3.connect(os.fspath(path), timeout=timeout, check_same_thread=not threads)
    if wal and os.fspath(path) != ":memory:":
        with conn:
            conn.execute("PRAGMA journal_mode=WAL")
    return conn


def not_a_database(path: str | os.PathLike[str], why: str) -> ValueError:
    """The error for a path that is no SQLite database this package may open (``why`` says what it is)."""
    return ValueError(
        f"{os.fspath(path)} {why}; it was left unchanged. Give the path of a SQLite database created by this library "
        "(or a new path: the file is created), or restore the file from a backup"
    )


def _problem(path: str | os.PathLike[str]) -> str | None:
    """What makes ``path`` no SQLite file (None: a SQLite file, or absent or empty: a new database)."""
    try:
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            return "is a directory, not a SQLite database file"
        if not stat.S_ISREG(info.st_mode):
            return "is not a regular file (a FIFO, socket or device)"
        with open(path, "rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if head and head != SQLITE_MAGIC:
        return "is not a SQLite database (it does not start with the SQLite header)"
    return None


def check_file(path: str | os.PathLike[str]) -> bool:
    """Whether a non-empty SQLite file is at ``path`` (False: absent or empty, a new database). Raises
    :func:`not_a_database` for a directory, a FIFO or device, an unreadable file or one without the SQLite
    header; nothing is written."""
    why = _problem(path)
    if why is not None:
        raise not_a_database(path, why)
    return os.path.isfile(path) and os.path.getsize(path) > 0


def _package() -> str:
    from importlib import metadata

    try:
        return f"fragrel-integrations {metadata.version('fragrel-integrations')}"
    except metadata.PackageNotFoundError:
        return "fragrel-integrations"


#: What reading a damaged file raises (RecursionError: JSON nested deeper than the decoder goes).
_DAMAGE = (ValueError, sqlite3.Error, KeyError, TypeError, IndexError, EOFError, OverflowError, RecursionError)


class _Checked(ValueError):
    """A finding of the checks here (another file, format or version; damage): passed on unchanged."""


@dataclass(frozen=True)
class SavedFormat:
    """One saved file format: ``name`` and ``version`` (the header's), ``what`` (a noun for messages, e.g.
    ``"FragRel index"``) and ``schema`` (its ``CREATE TABLE`` statements, besides the header's).

    >>> import tempfile
    >>> notes = SavedFormat("notes", 1, "notes file", ("CREATE TABLE notes (text TEXT)",))
    >>> path = notes.write(Path(tempfile.mkdtemp()) / "n.db", {"owner": "ann"},
    ...                    fill=lambda conn: conn.execute("INSERT INTO notes VALUES ('hi')"))
    >>> notes.header(path)["owner"], notes.read(path, lambda conn, _: conn.execute("SELECT text FROM notes").fetchall())
    ('ann', [('hi',)])
    """

    name: str
    version: int
    what: str
    schema: tuple[str, ...] = ()
    #: ``(table, format value)`` of the key/value header an earlier layout of this format kept: such a file is
    #: this format's (:meth:`owns` it, so a cache can replace it) and reads as "an earlier layout: rebuild it".
    earlier: tuple[tuple[str, str], ...] = ()

    def damaged(self, path: str | os.PathLike[str], detail: object) -> ValueError:
        """The one error for a file of this format that cannot be read back (``detail`` says what is wrong)."""
        return _Checked(f"{os.fspath(path)} is a damaged {self.what} ({detail}): delete it or save it again")

    def _foreign(self, path: str | os.PathLike[str], detail: object) -> _Checked:
        return _Checked(f"{os.fspath(path)} is not a {self.what} file ({detail})")

    def owns(self, path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` holds a file of this format, sound or damaged (one that may be replaced); False when
        it is absent, empty or anything else."""
        try:
            if not check_file(path):
                return False
            with contextlib.closing(connect(path, read_only=True)) as conn:
                return self._layout(conn) is not None
        except (ValueError, sqlite3.Error):
            return False

    def _layout(self, conn: sqlite3.Connection) -> str | None:
        """``"current"`` or ``"earlier"`` when the database is a file of this format, else None."""
        for i, (table, value) in enumerate((("header", json.dumps(self.name)), *self.earlier)):
            try:
                row = conn.execute(f"SELECT value FROM {table} WHERE key = 'format'").fetchone()
            except sqlite3.Error:
                continue
            if row is not None and row[0] == value:
                return "earlier" if i else "current"
        return None

    def check_target(self, path: str | os.PathLike[str]) -> None:
        """ValueError unless a save may write ``path``: absent, empty, or a file of this format."""
        if Path(path).is_dir():
            raise ValueError(f"{os.fspath(path)} is a directory: give a file path for the {self.what}")
        if Path(path).exists() and os.path.getsize(path) and not self.owns(path):
            try:
                self.header(path)
            except ValueError as exc:
                raise ValueError(f"refusing to overwrite {os.fspath(path)}: {exc}") from None

    def _check(self, path: str | os.PathLike[str], conn: sqlite3.Connection) -> dict[str, Any]:
        if self.earlier and self._layout(conn) == "earlier":
            raise _Checked(f"{os.fspath(path)} is a {self.what} of an earlier layout: rebuild it")
        try:
            rows = conn.execute("SELECT key, value FROM header").fetchall()
        except sqlite3.Error as exc:
            raise self._foreign(path, exc) from None
        raw = dict(rows)
        if raw.get("format") != json.dumps(self.name):
            raise self._foreign(path, f"no {self.name!r} header")
        try:
            header = {k: stored_json(v, f"the header's {k}") for k, v in raw.items()}
        except ValueError as exc:
            raise self.damaged(path, exc) from None
        if header.get("version") != self.version:
            raise _Checked(
                f"{os.fspath(path)} is a {self.what} of version {header.get('version')!r}; this fragrel-integrations "
                f"reads version {self.version}: rebuild it"
            )
        if not isinstance(header.get("built_by"), dict):
            raise self.damaged(path, "its header does not say what built it")
        return header

    @contextlib.contextmanager
    def _reading(self, path: str | os.PathLike[str]) -> Iterator[sqlite3.Connection]:
        """A read-only connection to the checked file; what fails while reading is :meth:`damaged`."""
        if not Path(path).is_file():
            raise FileNotFoundError(f"{os.fspath(path)}: no such {self.what} file")
        why = _problem(path)
        if why is not None:
            raise self._foreign(path, why)
        try:
            conn = connect(path, read_only=True)
        except sqlite3.Error as exc:
            raise self._foreign(path, exc) from None
        try:
            yield conn
        except _Checked:
            raise
        except _DAMAGE as exc:
            raise self.damaged(path, f"{type(exc).__name__}: {exc}" if type(exc) is not ValueError else exc) from exc
        finally:
            conn.close()

    def header(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """The header of the file at ``path`` (values decoded from JSON), checked: FileNotFoundError when there
        is no file; ValueError naming it for another file, format or version, or a damaged header."""
        with self._reading(path) as conn:
            return self._check(path, conn)

    def read(self, path: str | os.PathLike[str], read: Callable[[sqlite3.Connection, dict[str, Any]], T]) -> T:
        """``read(connection, header)`` on the checked file, opened read-only; any error it meets (a ValueError
        of a failed check included) is the file's :meth:`damaged` error."""
        with self._reading(path) as conn:
            return read(conn, self._check(path, conn))

    def _stamp(self, conn: sqlite3.Connection, built_by: Mapping[str, Any], header: Mapping[str, Any]) -> None:
        conn.execute(_HEADER_TABLE)
        for statement in self.schema:
            conn.execute(statement)
        rows = {"format": self.name, "version": self.version, **header, "built_by": {"package": _package(), **built_by}}
        conn.executemany(
            "INSERT INTO header VALUES (?, ?)", [(k, json.dumps(v, sort_keys=True)) for k, v in rows.items()]
        )

    def write(
        self,
        path: str | os.PathLike[str],
        header: Mapping[str, Any],
        *,
        built_by: Mapping[str, Any] | None = None,
        fill: Callable[[sqlite3.Connection], object] | None = None,
    ) -> Path:
        """Write a new file of this format to ``path`` in one step (a temporary file in the same folder, moved
        over the target; nothing is left behind on failure): the header (``header``'s JSON values, ``built_by``)
        and the schema, then ``fill(connection)`` inside the same transaction. Returns the path."""
        path = Path(path).expanduser()
        self.check_target(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            with contextlib.closing(connect(tmp)) as conn, conn:
                self._stamp(conn, built_by or {}, header)
                if fill is not None:
                    fill(conn)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return path

    def claim(self, cursor: Any, where: str) -> None:
        """In a write transaction on the live store ``where`` (``cursor``: its connection or cursor): check the
        header, or give a database without tables the header and the schema (a database of something else is
        refused)."""
        tables = sorted(r[0] for r in cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
        if "header" in tables:
            self._check(where, cursor)
        elif tables:
            raise self._foreign(where, f"it holds the tables {tables[:5]} and no header")
        else:
            self._stamp(cursor, {}, {})

    def open(self, path: str | os.PathLike[str], **options: Any) -> sqlite3.Connection:
        """A connection (``options`` go to :func:`connect`) to a live store of this format, :meth:`claim`-ed
        under the write lock (two processes opening one new file agree)."""
        where = os.fspath(path)
        if where != ":memory:":
            where = str(Path(where).expanduser())
            check_file(where)
            Path(where).parent.mkdir(parents=True, exist_ok=True)
        conn = connect(where, **options)
        try:
            with conn:
                conn.execute("BEGIN IMMEDIATE")
                self.claim(conn, where)
        except BaseException:
            conn.close()
            raise
        return conn
