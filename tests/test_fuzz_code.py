"""Property/fuzz tests over the code loader, index, retrieval and persistence entry points (issue 15).

Random small repository trees (random bytes, code-like text, empty files, odd names, folders named like source
files) and random or damaged index files. The only exceptions allowed are the documented ValueError/TypeError
family; every call finishes in bounded time; a skipped file is always reported."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fragrel_integrations.core.code import (
    CodeRelation,
    SkippedFile,
    SourceFile,
    from_repository,
    load_relation,
    load_repository,
)
from fragrel_integrations.core.code.loader import read_source_file

pytest.importorskip("tree_sitter")

FUZZ = settings(
    max_examples=25,
    deadline=None,  # bounded below by an explicit, generous wall-clock check per example
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PER_CALL_SECONDS = 10.0

_NAME_CHARS = st.sampled_from([*"abcXYZ_-. 0é中$", "\u200b", "~"])
_names = st.text(_NAME_CHARS, min_size=1, max_size=8).filter(lambda s: s not in (".", "..") and "/" not in s)
_extensions = st.sampled_from([".py", ".js", ".ts", ".tsx", ".go", ".java", ".PY", ".txt", ""])
_CODE = st.sampled_from(
    [
        "def f(x):\n    return g(x)\n",
        "class A:\n    def m(self):\n        return self.m()\n",
        "import os\nfrom . import b\n",
        "function f() { return g(); }\n",
        "package main\nfunc main() { f() }\n",
        "a = 1\n",
        "(((((\n",
        "'''\n",
        "\r\n",
        "\x00",
        "\ufeff",
        "!!! ??? ",
        "\t\t\t",
        "x" * 50,
    ]
)
_contents = st.one_of(
    st.binary(max_size=300),
    st.lists(_CODE, max_size=12).map(lambda parts: "".join(parts).encode("utf-8")),
    st.just(b""),
    st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
)
_entry = st.tuples(st.lists(_names, min_size=0, max_size=2), _names, _extensions, _contents, st.booleans())
_trees = st.lists(_entry, min_size=0, max_size=6)


def _write_tree(root: Path, entries) -> None:
    for folders, name, ext, data, as_folder in entries:
        where = root.joinpath(*folders)
        try:
            where.mkdir(parents=True, exist_ok=True)
            target = where / (name + ext)
            if as_folder and ext:  # a folder named like a source file
                target.mkdir(exist_ok=True)
            elif not target.is_dir():
                target.write_bytes(data)
        except OSError:
            continue  # a name the file system refuses (or a clash of file and folder): not the code under test


def _timed(fn):
    t0 = time.perf_counter()
    try:
        return fn()
    finally:
        elapsed = time.perf_counter() - t0
        assert elapsed < PER_CALL_SECONDS, f"took {elapsed:.1f} s"


@FUZZ
@given(tree=_trees, query=st.text(max_size=40), k=st.integers(1, 5), scorer=st.sampled_from(["jaccard", "bm25"]))
def test_random_repositories_index_and_retrieve_or_raise_value_error(tree, query, k, scorer):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "repo"
        root.mkdir()
        _write_tree(root, tree)
        repo = _timed(lambda: load_repository(root))
        on_disk = {
            Path(dp, f).relative_to(root).as_posix()
            for dp, _, fs in os.walk(root)
            for f in fs
            if not any(part.startswith(".") for part in Path(dp, f).relative_to(root).parts[:-1])
        }
        seen = {f.path for f in repo.files} | {s.path for s in repo.skipped}
        sources = {
            p for p in on_disk if os.path.splitext(p)[1].lower() in (".py", ".js", ".ts", ".tsx", ".go", ".java")
        }
        assert sources <= seen  # every source file is indexed or reported, never silently dropped
        assert all(isinstance(s, SkippedFile) and s.reason for s in repo.skipped)
        try:
            index = _timed(lambda: from_repository(root, scorer=scorer, show_progress=False))
        except ValueError as exc:
            assert "no source code to index" in str(exc)
            assert not any(f.text for f in repo.files)  # only empty files (or none) were left to index
            return
        if not query.strip():  # an empty or blank context is refused (issue 25)
            with pytest.raises(ValueError, match="the query is"):
                index.retrieve(query, k=k)
            return
        hits = _timed(lambda: index.retrieve(query, k=k))
        assert 1 <= len(hits) <= k
        assert all(np.isfinite([h.score, h.independent_score, h.environment_score]).all() for h in hits)


@FUZZ
@given(
    rel=st.lists(st.sampled_from(["a", "b", ".", "/", "\\", "~", "é", "..", "\x00"]), max_size=8).map("".join),
    ext=_extensions,
)
def test_read_source_file_returns_a_file_or_a_reason(rel, ext):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "a.py").write_text("x = 1\n")
        try:
            item = _timed(lambda: read_source_file(root, rel + ext))
        except ValueError:
            return  # paths outside the root, NUL in a path: documented
        assert isinstance(item, SourceFile | SkippedFile)


@pytest.fixture(scope="module")
def stored_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzzrepo")
    (root / "pkg").mkdir()
    (root / "pkg" / "a.py").write_text("from .b import g\n\n\ndef f():\n    return g()\n")
    (root / "pkg" / "b.py").write_text("def g():\n    return 1\n")
    path = root.parent / "fuzz-index.sqlite"
    CodeRelation.from_repository(root, cache=path, show_progress=False)
    return root, path.read_bytes()


@FUZZ
@given(data=st.data())
def test_damaged_or_foreign_index_files_give_value_error(stored_index, data):
    root, good = stored_index
    kind = data.draw(st.sampled_from(["random", "truncated", "flipped", "table"]))
    if kind == "random":
        blob = data.draw(st.binary(max_size=200))
    elif kind == "truncated":
        blob = good[: data.draw(st.integers(0, len(good) - 1))]
    elif kind == "flipped":
        raw = bytearray(good)
        for _ in range(data.draw(st.integers(1, 8))):
            i = data.draw(st.integers(0, len(raw) - 1))
            raw[i] ^= data.draw(st.integers(1, 255))
        blob = bytes(raw)
    else:
        blob = good
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "idx.sqlite"
        path.write_bytes(blob)
        if kind == "table":  # a well-formed database with one table's content replaced
            table, column = data.draw(
                st.sampled_from([("header", "value"), ("files", "records"), ("files", "arrays"), ("relation", "value")])
            )
            value = data.draw(st.one_of(st.binary(max_size=40), st.text(max_size=40), st.just("null")))
            conn = sqlite3.connect(path)
            with conn:
                conn.execute(f"UPDATE {table} SET {column} = ?", (value,))
            conn.close()
        before = path.read_bytes()
        with contextlib.suppress(ValueError):
            _timed(lambda: load_relation(path, root=root))
        try:
            rel = _timed(lambda: CodeRelation.from_repository(root, cache=path, show_progress=False))
        except ValueError as exc:
            assert "not a FragRel code index" in str(exc) or "is empty" in str(exc)
            assert path.read_bytes() == before  # refused: the file is left as it was
        else:
            assert len(load_relation(path, root=root)) == len(rel)  # ours: rebuilt or reused, readable again
