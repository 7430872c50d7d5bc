"""Hostile inputs to FragRel-for-code (issue 15): a user's file given as cache, FIFOs and unreadable files in a
repository, files without a word token. Each case ends in a clear error or a reported skip, never lost data,
a hang or a raw sqlite3/bm25s/PermissionError traceback."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import sqlite3
import threading
from pathlib import Path

import pytest
from _code_fixtures import make_python_repo

import fragrel_integrations.core.code.loader as loader_mod
from fragrel_integrations.cli import main
from fragrel_integrations.core.code import CodeRelation, from_repository, load_relation, load_repository
from fragrel_integrations.core.code.code_file import is_code_index, save_relation
from fragrel_integrations.core.code.loader import read_source_file

NOTES = b"my notes: never to be lost\n"


@pytest.fixture
def repo(tmp_path):
    return make_python_repo(tmp_path)


def _finishes(fn, seconds=20.0):
    """Run ``fn`` in a daemon thread; fail (instead of hanging the suite) when it does not return in time."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # re-raised below in the test thread
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"did not return within {seconds} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


# ------------------------------------------------------------------------------------------------ cache


def test_cli_cache_refuses_a_users_file_and_leaves_it_intact(repo, tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_bytes(NOTES)
    assert main(["retrieve-code", str(repo), "return g()", "--quiet", "--cache", str(notes)]) == 2
    err = capsys.readouterr().err
    assert "not a FragRel code index" in err and "another cache path" in err
    assert notes.read_bytes() == NOTES


def test_cache_refuses_another_sqlite_database(repo, tmp_path):
    db = tmp_path / "app.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
        conn.execute("INSERT INTO users VALUES ('ann')")
    conn.close()
    before = db.read_bytes()
    with pytest.raises(ValueError, match="not a FragRel code index"):
        CodeRelation.from_repository(repo, cache=db, show_progress=False)
    rel = CodeRelation.from_repository(repo, show_progress=False)
    for save in (rel.save, lambda p: save_relation(rel, p)):
        with pytest.raises(ValueError, match="refusing to overwrite"):
            save(db)
    with pytest.raises(ValueError, match="not a FragRel code index"):
        load_relation(db)
    assert db.read_bytes() == before


def test_empty_and_new_cache_paths_are_used_and_reused(repo, tmp_path):
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    assert not is_code_index(empty)
    rel = CodeRelation.from_repository(repo, cache=empty, show_progress=False)
    assert is_code_index(empty) and len(load_relation(empty)) == len(rel)
    fresh = tmp_path / "new" / "deeper" / "idx.sqlite"
    CodeRelation.from_repository(repo, cache=fresh, show_progress=False)
    again = CodeRelation.from_repository(repo, cache=fresh, show_progress=False)  # reused, still ours
    assert is_code_index(fresh) and len(again) == len(rel)


def test_truncated_index_is_a_clear_error_not_a_raw_sqlite_error(repo, tmp_path):
    good = tmp_path / "idx.sqlite"
    CodeRelation.from_repository(repo, cache=good, show_progress=False)
    truncated = tmp_path / "trunc.sqlite"
    truncated.write_bytes(good.read_bytes()[:3000])
    before = truncated.read_bytes()
    for call in (
        lambda: load_relation(truncated),
        lambda: CodeRelation.from_repository(repo, cache=truncated, show_progress=False),
    ):
        with pytest.raises(ValueError, match=r"not a FragRel code index|damaged") as info:
            call()
        assert not isinstance(info.value, sqlite3.Error)
    assert truncated.read_bytes() == before  # not ours for sure: kept for the user to look at
    text = tmp_path / "text.sqlite"
    text.write_bytes(b"SQLite format 3\x00" + b"garbage" * 20)
    with pytest.raises(ValueError, match="not a FragRel code index"):
        load_relation(text)


@pytest.mark.parametrize(
    "damage",
    [
        ("UPDATE relation SET value = x'00ff'", ()),
        ("UPDATE header SET value = ? WHERE key = 'threshold'", ("[" * 100_000 + "]" * 100_000,)),  # RecursionError
    ],
    ids=["blob", "nested-json"],
)
def test_damaged_index_of_ours_is_rebuilt(repo, tmp_path, caplog, damage):
    idx = tmp_path / "idx.sqlite"
    rel = CodeRelation.from_repository(repo, cache=idx, show_progress=False)
    conn = sqlite3.connect(idx)
    with conn:
        conn.execute(*damage)
    conn.close()
    with pytest.raises(ValueError, match=r"damaged FragRel code index .*: delete it"):
        load_relation(idx)
    with caplog.at_level(logging.WARNING):
        rebuilt = CodeRelation.from_repository(repo, cache=idx, show_progress=False)
    assert "rebuilding the stored code index" in caplog.text
    assert (rebuilt.weights != rel.weights).nnz == 0 and len(load_relation(idx)) == len(rel)


def test_cache_path_under_a_file_is_a_clear_cli_error(repo, tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_bytes(NOTES)
    assert main(["retrieve-code", str(repo), "g()", "--quiet", "--cache", str(notes / "idx.sqlite")]) == 2
    assert "cannot be read" in capsys.readouterr().err and notes.read_bytes() == NOTES


# ------------------------------------------------------------------------------------------------ loader


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")
def test_fifo_named_like_source_is_skipped_not_read(repo, tmp_path, caplog, capsys):
    os.mkfifo(repo / "pkg" / "pipe.py")
    os.symlink(repo / "pkg" / "pipe.py", repo / "pkg" / "pipe_link.py")
    with caplog.at_level(logging.WARNING):
        loaded = _finishes(lambda: load_repository(repo))
    reasons = {s.path: s.reason for s in loaded.skipped}
    assert reasons["pkg/pipe.py"] == "not a regular file (FIFO)"
    assert reasons["pkg/pipe_link.py"].startswith("symlink")
    assert "pkg/pipe.py (not a regular file (FIFO))" in caplog.text
    assert read_source_file(repo, "pkg/pipe.py").reason == "not a regular file (FIFO)"
    assert _finishes(lambda: main(["retrieve-code", str(repo), "return g()", "--quiet"])) == 0
    assert capsys.readouterr().out.startswith("#1 ")


def test_special_file_swapped_in_after_the_check_is_caught_on_the_descriptor(tmp_path, monkeypatch):
    """A FIFO that looks like a regular file to the first check (a swap between walk and open) is opened
    without blocking and rejected by ``fstat`` on the descriptor."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("needs POSIX FIFOs")
    root = tmp_path / "r"
    root.mkdir()
    (root / "real.py").write_text("x = 1\n")
    os.mkfifo(root / "pipe.py")
    regular = os.lstat(root / "real.py")
    real_lstat = os.lstat

    def lying_lstat(path, *args, **kwargs):
        return regular if str(path).endswith("pipe.py") else real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(loader_mod.os, "lstat", lying_lstat)
    item = _finishes(lambda: read_source_file(root, "pipe.py"))
    assert item.reason == "not a regular file (FIFO)"


def test_folder_named_like_source_is_not_read(tmp_path):
    root = tmp_path / "r"
    (root / "odd.py").mkdir(parents=True)
    assert read_source_file(root, "odd.py").reason == "not a regular file (folder)"


def test_unreadable_file_is_skipped_and_reported(repo, monkeypatch, caplog):
    """Simulated with a patched ``os.open`` (tests may run as root, where chmod 000 does not block reads);
    a real chmod 000 is checked too when not root."""
    real_open = os.open
    target = str(repo / "pkg" / "b.py")

    def denied(path, *args, **kwargs):
        if str(path) == target:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(loader_mod.os, "open", denied)
        with caplog.at_level(logging.WARNING):
            loaded = load_repository(repo)
        hits = from_repository(repo, show_progress=False).retrieve("return g()", k=1)
    assert {s.path: s.reason for s in loaded.skipped}["pkg/b.py"] == "unreadable: Permission denied"
    assert "pkg/b.py (unreadable: Permission denied)" in caplog.text
    assert "pkg/b.py" not in [f.path for f in loaded.files] and hits
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        os.chmod(target, 0)
        try:
            assert read_source_file(repo, "pkg/b.py").reason == "unreadable: Permission denied"
        finally:
            os.chmod(target, 0o644)


def test_unreadable_folder_is_reported(repo, monkeypatch):
    real_scandir = os.scandir
    target = str(repo / "pkg")

    def denied(path=".", *args, **kwargs):
        if str(path) == target:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_scandir(path, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", denied)
    loaded = load_repository(repo)
    assert {s.path: s.reason for s in loaded.skipped}["pkg"] == "unreadable folder: Permission denied"
    assert not loaded.files


def test_unreadable_context_file_is_a_clear_cli_error(repo, tmp_path, monkeypatch, capsys):
    ctx = tmp_path / "ctx.py"
    ctx.write_text("g(")

    def denied(self, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_text", denied)
    assert main(["retrieve-code", str(repo), f"@{ctx}", "--quiet"]) == 2
    assert "cannot read the context file" in capsys.readouterr().err


def test_line_and_byte_caps_are_checked_and_reported(tmp_path, capsys):
    root = tmp_path / "r"
    root.mkdir()
    (root / "small.py").write_text("def f():\n    return 1\n")
    (root / "long.py").write_text("x = 1\n" * 50)
    loaded = load_repository(root, max_file_lines=10)
    assert {s.path: s.reason for s in loaded.skipped} == {"long.py": "more than max_file_lines=10 lines"}
    for bad in (0, -1, 1.5, True, "10"):
        with pytest.raises(ValueError, match="max_file_lines must be a positive int"):
            load_repository(root, max_file_lines=bad)
        with pytest.raises(ValueError, match="max_file_bytes must be a positive int"):
            read_source_file(root, "small.py", max_file_bytes=bad)
    assert main(["retrieve-code", str(root), "f()", "--quiet", "--max-file-lines", "10", "--json"]) == 0
    assert "long.py" not in capsys.readouterr().out
    assert main(["retrieve-code", str(root), "f()", "--quiet", "--max-file-bytes", "5"]) == 2
    err = capsys.readouterr().err
    assert "larger than max_file_bytes" in err and "raise max_file_bytes" in err


# ------------------------------------------------------------------------------------------------ tokens


def test_fragments_without_word_tokens_score_zero_with_bm25(tmp_path, capsys):
    root = tmp_path / "r"
    root.mkdir()
    (root / "p.py").write_text("!!!\n???\n+-*/\n")
    for query in ("x", "!!!"):
        hits = from_repository(root, scorer="bm25", show_progress=False).retrieve(query, k=2)
        assert len(hits) == 1 and hits[0].score == 0.0
    assert main(["retrieve-code", str(root), "???", "--scorer", "bm25", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("#1 p.py:1-3")
    with pytest.raises(TypeError, match="query must be str"):
        from_repository(root, scorer="bm25", show_progress=False).retrieve(b"x")  # type: ignore[arg-type]


def test_repository_of_nul_bytes_is_a_clear_error(tmp_path, capsys):
    root = tmp_path / "r"
    root.mkdir()
    (root / "a.py").write_bytes(b"\x00" * 4096)
    (root / "b.py").write_bytes(b"")
    with pytest.raises(ValueError, match=r"no source code to index.*a\.py \(binary\)"):
        from_repository(root, scorer="bm25", show_progress=False)
    assert main(["retrieve-code", str(root), "x", "--scorer", "bm25", "--quiet"]) == 2
    assert "no source code to index" in capsys.readouterr().err
    shutil.rmtree(root)
    root.mkdir()
    with pytest.raises(ValueError, match="no source code to index: give the root folder"):
        from_repository(root, show_progress=False)


# ------------------------------------------------------------------------------------------ issue 25


def test_deeply_nested_folders_are_walked_without_recursion(tmp_path, capsys):
    """``os.walk`` recursed once per level: 2,000 nested folders died with a RecursionError (1,500 here, so the
    deepest path stays under the 4,096-byte limit of the system calls)."""
    root = tmp_path / "r"
    root.mkdir()
    (root / "top.py").write_text("def top():\n    return deep()\n")
    deepest = root
    for _ in range(1_500):
        deepest = deepest / "d"
        deepest.mkdir()
    try:
        (deepest / "deep.py").write_text("def deep():\n    return 42\n")
        loaded = _finishes(lambda: load_repository(root))
        assert [f.path for f in loaded.files] == ["d/" * 1_500 + "deep.py", "top.py"] and not loaded.skipped
        assert main(["retrieve-code", str(root), "return deep(", "--quiet", "--json"]) == 0
        assert any(h["path"].endswith("deep.py") for h in json.loads(capsys.readouterr().out))
    finally:  # shutil.rmtree recurses too: remove the chain bottom-up
        (deepest / "deep.py").unlink(missing_ok=True)
        while deepest != root:
            deepest.rmdir()
            deepest = deepest.parent


def test_utf16_source_is_decoded_and_binary_source_is_warned_about(tmp_path, caplog, capsys):
    root = tmp_path / "r"
    root.mkdir()
    (root / "wide.py").write_bytes("def wide():\n    return 'caf\u00e9'\n".encode("utf-16"))
    (root / "wide32.py").write_bytes("def wide32():\n    return 3\n".encode("utf-32"))
    (root / "blob.py").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    (root / "plain.py").write_text("def plain():\n    return wide()\n")
    with caplog.at_level(logging.WARNING):
        loaded = load_repository(root)
    texts = {f.path: f.text for f in loaded.files}
    assert texts["wide.py"] == "def wide():\n    return 'caf\u00e9'\n" and "def wide32" in texts["wide32.py"]
    assert sorted(loaded.fallback_decoded) == ["wide.py", "wide32.py"]
    assert {s.path: s.reason for s in loaded.skipped} == {"blob.py": "binary"}
    assert "blob.py (binary)" in caplog.text
    assert main(["retrieve-code", str(root), "return wide(", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "wide.py" in captured.out
    assert "fragrel: warning: left out 1 source file(s) or folder(s): blob.py (binary)" in captured.err
    (root / "bad16.py").write_bytes(b"\xff\xfe" + b"\x00\xd8")  # a BOM, then a lone surrogate
    assert read_source_file(root, "bad16.py").reason.startswith("not valid UTF-16/32 after its byte-order mark")


@pytest.mark.parametrize("context", ["", "   \n\t"])
def test_an_empty_code_context_is_refused(repo, context, capsys):
    assert main(["retrieve-code", str(repo), context, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fragrel: error: the code context is") and "code before the cursor" in err
    assert err.count("\n") == 1
    index = from_repository(repo, scorer="bm25", show_progress=False)
    with pytest.raises(ValueError, match=r"the query is (empty|blank): give the text to retrieve for"):
        index.retrieve(context)


def test_code_printed_to_the_terminal_has_no_control_characters(tmp_path, capsys):
    root = tmp_path / "r"
    root.mkdir()
    (root / "evil.py").write_text("x = '\x1b]0;owned\x07\x1b[2J\r'  # evil\ndef f():\n    return x\n")
    assert main(["retrieve-code", str(root), "x = '", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "owned" in out and not any(c in out for c in "\x1b\x07\r")
    assert main(["retrieve-code", str(root), "x = '", "--quiet", "--prompt"]) == 0
    out = capsys.readouterr().out
    assert "owned" in out and not any(c in out for c in "\x1b\x07\r")
    assert main(["retrieve-code", str(root), "x = '", "--quiet", "--json"]) == 0
    assert "\x1b]0;owned" in json.loads(capsys.readouterr().out)[0]["text"]  # JSON keeps the text, escaped
