"""Fuzzing the triplet memory's untrusted-text entry points (issue 15) with Hypothesis: the MEM_WRITE/MEM_READ
parsers, the controller's lenient parser and ``memorize``/``answer`` over arbitrary model replies, and batches
of writes with bad items; and the SQLite files of the triplet store and the SCM stream, truncated or with
bytes flipped. Properties: no exception outside the documented ValueError/TypeError family,
bounded (linear) time, exact round trips, caps respected, and nothing already stored lost."""

from __future__ import annotations

import functools
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fragrel_integrations.core.scm import SCMStream
from fragrel_integrations.core.triplets import Triplet, TripletMemoryController, TripletStore
from fragrel_integrations.core.triplets.lenient import lenient_triplets
from fragrel_integrations.core.triplets.text_api import (
    MAX_TERM_CHARS,
    MemoryCallError,
    parse_calls,
    render_read,
    render_write,
    scan_calls,
    strip_calls,
)
from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# pieces that structure calls and lines, plus awkward characters, mixed with free text
TOKENS = st.sampled_from(
    [
        "[MEM_WRITE{",
        "[MEM_READ{",
        "MEM_",
        ">>",
        ">",
        "{",
        "}",
        "[",
        "]",
        "\\",
        ":",
        ";",
        " ",
        "\n",
        "\t",
        "\x00",
        "\ud800",
        "\u2028",
        "1.",
        "- ",
        "Dan",
        "works at",
        "é",
    ]
)
REPLIES = st.lists(st.one_of(TOKENS, st.text(max_size=6)), max_size=60).map("".join)
TERMS = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=30
).filter(lambda s: s.strip() != "")


def _timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


@FUZZ
@given(REPLIES)
def test_parsers_accept_any_text(text):
    (calls, skipped), elapsed = _timed(scan_calls, text)
    assert elapsed < 1.0
    ends = [-1]
    for call in calls:
        assert call.start > ends[-1] and text.startswith(("[MEM_WRITE{", "[MEM_READ{"), call.start)
        ends.append(call.end)
        again = parse_calls(text[call.start : call.end])  # a parsed call parses alone to itself
        assert len(again) == 1 and (again[0].kind, again[0].fields, again[0].results) == (
            call.kind,
            call.fields,
            call.results,
        )
        for term in call.fields:
            assert term is None or ("\x00" not in term and 0 < len(term) <= MAX_TERM_CHARS and term.strip())
    assert all(text[s.start :].startswith(s.text) and s.reason for s in skipped)
    try:
        strict = parse_calls(text, strict=True)
    except MemoryCallError:
        assert skipped  # strict mode raises exactly when the lenient scan skipped something
    else:
        assert not skipped and strict == calls
    assert isinstance(strip_calls(text), str)
    for trip in lenient_triplets(text):
        assert all(t.strip() and "\x00" not in t and ">>" not in t for t in trip)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.one_of(TOKENS, st.text(max_size=4)), min_size=1, max_size=8).map("".join))
def test_parsers_are_linear_on_repeated_patterns(unit):
    text = (unit * (60_000 // max(len(unit), 1) + 1))[:60_000]
    start = time.perf_counter()
    scan_calls(text)
    strip_calls(text)
    lenient_triplets(text)
    assert time.perf_counter() - start < 2.0


@FUZZ
@given(TERMS, TERMS, TERMS, REPLIES, REPLIES)
def test_render_then_parse_gives_every_term_back_exactly(a, b, c, prefix, suffix):
    trip = Triplet(a, b, c)
    prefix = prefix.rstrip("\\")  # a trailing backslash would escape the call's bracket, by design
    write = render_write(trip)
    calls = parse_calls(f"{prefix} {write} {suffix}")
    assert any(call.start == len(prefix) + 1 and call.triplet == trip for call in calls)
    for pattern in [(a, None, None), (None, b, c), (a, b, None)]:
        for fields in ("all", "missing"):
            (read,) = parse_calls(render_read(pattern, [trip, trip], fields=fields))
            assert read.fields == pattern and read.results == (trip, trip)
    (unanswered,) = parse_calls(render_read((a, None, c)))
    assert unanswered.fields == (a, None, c)


_STORE = TripletStore(":memory:", embedder=HashingEmbedder(dim=32))


def _snapshot() -> set[tuple[str, str, str]]:
    return {tuple(r.triplet) for r in _STORE.records()}


@FUZZ
@given(REPLIES, st.booleans())
def test_memorize_and_answer_take_any_reply_and_lose_nothing(reply, lenient):
    before = _snapshot()
    model = ScriptedChatModel([reply, reply, "Done."], cycle=True)
    ctl = TripletMemoryController(model, _STORE, lenient=lenient, max_tokens=10**6, max_term_chars=40)
    result, elapsed = _timed(ctl.memorize, "a statement")
    assert elapsed < 2.0
    after = _snapshot()
    assert before <= after
    assert {tuple(r.triplet) for r in result.records} <= after
    for r in result.records:
        assert all(len(t) <= 40 and "\x00" not in t for t in r.triplet)
    answer, elapsed = _timed(ctl.answer, "a question?", allow_writes=True)
    assert elapsed < 2.0 and isinstance(answer.answer, str)
    assert after <= _snapshot()


ITEMS = st.one_of(
    st.tuples(TERMS, TERMS, TERMS),
    st.tuples(st.sampled_from(["", " ", "a\x00b", "ok"]), TERMS, TERMS),
    st.sampled_from([None, 3, ("a", "b"), "abc", {"subject": "s"}]),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(ITEMS, min_size=1, max_size=6))
def test_a_failing_batch_write_loses_nothing(items):
    before = _snapshot()
    try:
        _STORE.write_many(items)
    except (TypeError, ValueError):
        assert _snapshot() == before  # all or nothing
    else:
        assert before <= _snapshot()


@settings(max_examples=40, deadline=None)
@given(REPLIES)
def test_a_failing_model_loses_nothing(reply):
    _STORE.write(("anchor", "stays", "stored"))
    before = _snapshot()
    model = ScriptedChatModel([reply, RuntimeError("model server down")])
    ctl = TripletMemoryController(model, _STORE, max_tokens=10**6)
    ctl.memorize("x")
    with pytest.raises(RuntimeError, match="model server down"):
        ctl.memorize("y")
    assert before <= _snapshot() and ("anchor", "stays", "stored") in _snapshot()


@functools.cache
def _base_files() -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as tmp:
        return _build_files(Path(tmp))


def _build_files(root: Path) -> dict[str, bytes]:
    with TripletStore(root / "t.db", embedder=HashingEmbedder(dim=8)) as store:
        store.write_many([(f"s{i}", "rel", f"o{i}") for i in range(60)])
    with SCMStream(root / "s.db") as stream:
        for i in range(30):
            stream.append("s", f"turn {i} " * 5, "reply", summary="sum", embedding=np.ones(4))
    return {"triplets": (root / "t.db").read_bytes(), "scm": (root / "s.db").read_bytes()}


def _use(kind: str, path: Path) -> None:
    if kind == "triplets":
        with TripletStore(path, embedder=HashingEmbedder(dim=8)) as store:
            store.records(), store.read("s1"), store.read("s1x", "rel"), store.write(("a", "b", "c"))
    else:
        with SCMStream(path) as stream:
            stream.items("s"), stream.sessions(), stream.last("s"), stream.append("s", "a", "b")


@settings(max_examples=50, deadline=None)
@given(
    st.sampled_from(["triplets", "scm"]),
    st.one_of(
        st.tuples(st.just("cut"), st.floats(0, 0.999)),
        st.tuples(st.just("flip"), st.lists(st.tuples(st.floats(0, 0.999), st.integers(0, 255)), min_size=1)),
    ),
)
def test_damaged_database_files_give_value_errors_and_refusals_leave_them_unchanged(kind, damage):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = bytearray(_base_files()[kind])
        if damage[0] == "cut":
            data = data[: int(len(data) * damage[1])]
        else:
            for where, byte in damage[1]:
                data[int(len(data) * where)] = byte
        path = root / "damaged.db"
        path.write_bytes(bytes(data))
        try:
            _use(kind, path)
        except ValueError as exc:
            assert "damaged.db" in str(exc) or "scm_items" in str(exc) or "schema" in str(exc)
        except TypeError:
            pass  # a NULL where a number belongs, read from a damaged row
        if damage[0] == "cut" and len(data) > 0:
            assert path.read_bytes() == bytes(data)  # a truncated file is refused at open, untouched


def test_a_schema_byte_sqlite_cannot_decode_is_a_value_error(tmp_path):
    """Found by the fuzz test above: SQLite's error quotes the damaged schema name, which Python cannot decode."""
    path = tmp_path / "damaged.db"
    with TripletStore(path, embedder=HashingEmbedder(dim=8)) as store:
        store.write(("a", "b", "c"))
    data = bytearray(path.read_bytes())
    at = data.find(b"CREATE TABLE triplets")
    assert at >= 0
    data[at + len(b"CREATE TABLE tripl")] = 0x80
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"damaged\.db"):
        _use("triplets", path)


def test_a_missing_column_of_our_tables_is_a_value_error(tmp_path):
    """Also found by the fuzz test: a damaged column name (here the term table's, which the term index reads)."""
    import sqlite3

    path = tmp_path / "damaged.db"
    with TripletStore(path, embedder=HashingEmbedder(dim=8)) as store:
        store.write(("a", "b", "c"))
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE terms RENAME COLUMN vector TO vectxr")
    conn.close()
    with pytest.raises(ValueError, match=r"damaged\.db.*schema is not this library's"):
        _use("triplets", path)


def test_a_damaged_scm_row_is_a_value_error_naming_the_table(tmp_path):
    """Found by the fuzz test: a flipped byte turned a row's index into a blob (int() failed, no file named)."""
    import sqlite3

    path = tmp_path / "s.db"
    with SCMStream(path) as stream:
        stream.append("s", "a", "b")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE scm_items SET idx = ?", (b"\x11",))
    conn.close()
    with SCMStream(path) as stream, pytest.raises(ValueError, match="damaged row in the SQLite table scm_items"):
        stream.items("s")
