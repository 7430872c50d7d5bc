"""Hostile input to the triplet memory (issue 15): adversarial model replies parse in linear time, one bad call
never spoils a batch, terms round-trip exactly through the text API, length caps hold before anything is
stored, and a store or SCM stream opened on a file that is not a healthy SQLite database gives a clear
ValueError and leaves the file unchanged."""

from __future__ import annotations

import sqlite3
import time

import numpy as np
import pytest

from fragrel_integrations.core.scm import SCMStream
from fragrel_integrations.core.triplets import SQLiteBackend, Triplet, TripletMemoryController, TripletStore
from fragrel_integrations.core.triplets.lenient import lenient_triplets
from fragrel_integrations.core.triplets.memory_store import TripletWrite
from fragrel_integrations.core.triplets.text_api import (
    MAX_TERM_CHARS,
    escape_term,
    parse_calls,
    render_read,
    render_write,
    scan_calls,
    strip_calls,
)
from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel

BIG = 100_000  # characters of adversarial text; each case took seconds to minutes before the fix

ADVERSARIAL = {
    "lenient backtracking (issue 15)": ">" * BIG + "{",
    "many '>>' on one line": "a>>" * (BIG // 3),
    "open calls, never closed": "[MEM_WRITE{" * (BIG // 11),
    "read results, never closed": "[MEM_READ{a>>>>}: {a>>b>>c}; " * (BIG // 29),
    "escaped openers inside one term": "[MEM_WRITE{" + "\\[MEM_READ{" * (BIG // 11),
    "backslash runs": ("\\" * 50 + "[MEM_WRITE{a>>b>>c}]") * (BIG // 70),
    "near-openers": "[MEM_" * (BIG // 5),
    "list markers and spaces": ("1. " + " " * 50 + ">>\n") * (BIG // 56),
    "one huge line of terms": " >> ".join(["x" * 1000] * (BIG // 1004)),
}


@pytest.fixture
def store():
    s = TripletStore(":memory:", embedder=HashingEmbedder(dim=64))
    yield s
    s.close()


def _controller(reply: str, store: TripletStore, **kwargs) -> TripletMemoryController:
    # max_tokens large: the scripted model cuts replies to max_tokens words
    return TripletMemoryController(ScriptedChatModel([reply], cycle=True), store, max_tokens=10**6, **kwargs)


# ---------------------------------------------------------------------------------------- 1. linear parsing
@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_adversarial_text_parses_in_linear_time(name):
    text = ADVERSARIAL[name]
    start = time.perf_counter()
    scan_calls(text)
    strip_calls(text)
    lenient_triplets(text)
    assert time.perf_counter() - start < 2.0, name


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_adversarial_reply_memorize_and_answer_are_fast(store, name):
    text = ADVERSARIAL[name]
    ctl = _controller(text, store, max_reply_chars=len(text))  # no cut: the parsers themselves must be linear
    start = time.perf_counter()
    ctl.memorize("x")
    ctl.answer("y?")
    assert time.perf_counter() - start < 3.0, name


def test_issue_reply_that_took_76_seconds(store):
    start = time.perf_counter()
    result = _controller(">" * 2400 + "{", store).memorize("x")
    assert time.perf_counter() - start < 1.0
    assert result.records == [] and len(store) == 0


def test_long_reply_is_cut_before_parsing(store, caplog):
    reply = "[MEM_WRITE{a>>b>>c}]" + " " * 100 + "[MEM_WRITE{late>>call>>ignored}]"
    result = _controller(reply, store, max_reply_chars=50).memorize("x")
    assert [tuple(r.triplet) for r in result.records] == [("a", "b", "c")]
    assert result.reply == reply  # the raw reply is kept whole
    assert "cut to max_reply_chars=50" in caplog.text


def test_lenient_parser_keeps_its_meaning():
    text = "1. Dan >> works at >> Google\n- {Eve >> lives in >> Paris}\n2015 >> year of >> founding\nno >> triplet"
    assert lenient_triplets(text) == [
        Triplet("Dan", "works at", "Google"),
        Triplet("Eve", "lives in", "Paris"),
        Triplet("2015", "year of", "founding"),  # a number is a subject, not a list marker
    ]
    assert lenient_triplets("[MEM_WRITE{a>>b}]\n{a>>b>>c>>d}\n a >> >> c") == []


# ---------------------------------------------------------------------------------------- 2. partial batches
def test_a_nul_call_does_not_spoil_the_batch(store):
    reply = "[MEM_WRITE{Dan>>works at>>Google}]\n[MEM_WRITE{Eve\x00>>works at>>Acme}]\n[MEM_WRITE{Eve>>lives in>>Oslo}]"
    result = _controller(reply, store).memorize("x")
    assert [tuple(r.triplet) for r in result.records] == [("Dan", "works at", "Google"), ("Eve", "lives in", "Oslo")]
    ((skipped,),) = [result.skipped]
    assert "NUL" in skipped.reason and reply[skipped.start :].startswith("[MEM_WRITE{Eve\x00")
    assert len(store) == 2


def test_bad_lenient_lines_are_skipped_and_reported(store):
    reply = "Dan >> works at >> Google\nEve\x00 >> works at >> Acme\n" + "x" * 300 + " >> is >> long"
    result = _controller(reply, store).memorize("x")
    assert [tuple(r.triplet) for r in result.records] == [("Dan", "works at", "Google")]
    assert [s.start for s in result.skipped] == [26, 51]
    assert "NUL" in result.skipped[0].reason and "more than 200" in result.skipped[1].reason


class _PickyEmbedder(HashingEmbedder):
    """Rejects one term, as a real embedder or store might reject odd text."""

    def embed_documents(self, texts):
        if any("poison" in t for t in texts):
            raise ValueError("cannot embed poison")
        return super().embed_documents(texts)


def test_a_write_the_store_rejects_does_not_spoil_the_batch():
    store = TripletStore(":memory:", embedder=_PickyEmbedder(dim=64))
    store.write(("kept", "before", "all"))
    reply = "[MEM_WRITE{Dan>>works at>>Google}] [MEM_WRITE{poison>>is>>bad}] [MEM_WRITE{Eve>>works at>>Acme}]"
    result = _controller(reply, store).memorize("x")
    assert [r.t1 for r in result.records] == ["Dan", "Eve"]
    assert [s.reason for s in result.skipped] == ["the store rejected the write: cannot embed poison"]
    assert {r.t1 for r in store.records()} == {"kept", "Dan", "Eve"}  # nothing stored before was lost


def test_answer_with_writes_skips_bad_ones(store):
    store.write(("Dan", "works at", "Google"))
    model = ScriptedChatModel(["[MEM_WRITE{a\x00>>b>>c}] [MEM_WRITE{x>>y>>z}] [MEM_READ{Dan>>works at>>}]", "Google."])
    result = TripletMemoryController(model, store).answer("Where?", allow_writes=True)
    assert result.answer == "Google." and len(result.reads) == 1
    assert {tuple(r.triplet) for r in store.records()} == {("Dan", "works at", "Google"), ("x", "y", "z")}


class _NoneModel(ScriptedChatModel):
    def _generate(self, messages, temperature, max_tokens, stop):
        return None


def test_a_model_returning_no_text_gives_a_type_error(store):
    with pytest.raises(TypeError, match="returned NoneType, expected str"):
        TripletMemoryController(_NoneModel(["x"]), store).memorize("x")


# ---------------------------------------------------------------------------------------- 3. whitespace round trip
@pytest.mark.parametrize("term", [" Google", "Google ", "  two  spaces  ", "\tTab\n", " \\ ", "a > b "])
def test_whitespace_around_a_term_survives_the_round_trip(term):
    trip = Triplet(term, " works at", "x ")
    assert parse_calls(render_write(trip))[0].triplet == trip
    (read,) = parse_calls(render_read((term, None, None), [trip]))
    assert read.fields == (term, None, None) and read.results == (trip,)
    (missing,) = parse_calls(render_read((term, None, None), [trip], fields="missing"))
    assert missing.results == (trip,)


def test_unescaped_whitespace_from_a_model_is_stripped():
    (call,) = parse_calls("[MEM_WRITE{  Dan Jaffe >>  works at\t>> Google  }]")
    assert call.triplet == Triplet("Dan Jaffe", "works at", "Google")
    assert escape_term(" a b ") == "\\ a b\\ "  # inner spaces are not escaped
    (read,) = parse_calls(render_read((" ", "works at", None)))  # a whitespace-only field is a wildcard
    assert read.fields == (None, "works at", None)


def test_whitespace_survives_a_stored_read_through_the_controller(store):
    store.write((" Dan", "works at", "Google "))
    ctl = TripletMemoryController(ScriptedChatModel(["[MEM_READ{\\ Dan>>works at>>}]", "ok"]), store)
    ((_, records),) = ctl.answer("Where?").reads
    shown = ctl.model.calls[1]["messages"][-2]["content"]
    assert parse_calls(shown)[0].results == (Triplet(" Dan", "works at", "Google "),)
    assert [r.t3 for r in records] == ["Google "]


# ---------------------------------------------------------------------------------------- 5. length caps
def test_long_terms_are_refused_before_storage(store):
    long = "x" * 201
    reply = f"[MEM_WRITE{{{long}>>is>>long}}] [MEM_WRITE{{ok>>is>>short}}]"
    result = _controller(reply, store).memorize("x")
    assert [r.t1 for r in result.records] == ["ok"] and "201 characters" in result.skipped[0].reason
    assert [r.t1 for r in _controller(reply, store, max_term_chars=300).memorize("x").records] == [long, "ok"]
    assert parse_calls(f"[MEM_WRITE{{{'y' * (MAX_TERM_CHARS + 1)}>>b>>c}}]") == []
    assert len(parse_calls(f"[MEM_WRITE{{{'y' * (MAX_TERM_CHARS + 1)}>>b>>c}}]", max_term_chars=None)) == 1
    with pytest.raises(ValueError, match="max_term_chars"):
        scan_calls("x", max_term_chars=0)
    with pytest.raises(ValueError, match="max_reply_chars"):
        TripletMemoryController(ScriptedChatModel(["x"]), store, max_reply_chars=0)


def test_a_lone_surrogate_is_a_malformed_call():
    calls, skipped = scan_calls("[MEM_WRITE{a\ud800>>b>>c}] [MEM_WRITE{a>>b>>c}]")
    assert [c.triplet for c in calls] == [Triplet("a", "b", "c")] and "surrogate" in skipped[0].reason


@pytest.mark.parametrize(
    ("field", "write"),
    [
        ("Triplet.t1", {"triplet": ("Ana\ud800", "likes", "tea")}),
        ("Triplet.t2", {"triplet": ("Ana", "\udc00likes", "tea")}),
        ("Triplet.t3", {"triplet": {"t1": "Ana", "t2": "likes", "t3": "tea\udfff"}}),
        ("key", {"triplet": ("Ana", "likes", "tea"), "key": "k\ud83d"}),
        ("a namespace label", {"triplet": ("Ana", "likes", "tea"), "namespace": ("users", "ana\ud800")}),
        ("payload", {"triplet": ("Ana", "likes", "tea"), "payload": {"note": "half an emoji \ud83d"}}),
    ],
)
def test_a_lone_surrogate_in_a_write_is_a_value_error_before_anything_is_stored(field, write, tmp_path):
    store = TripletStore(tmp_path / "t.db", embedder=HashingEmbedder(dim=64))
    store.write(("Bo", "likes", "coffee"))
    write = dict(write)
    with pytest.raises(ValueError, match=f"{field} contains .* lone surrogate .*errors='replace'"):
        store.write(write.pop("triplet"), **write)
    with pytest.raises(ValueError, match="lone surrogate"):  # one bad item: the whole batch is refused
        store.write_many([("Cy", "likes", "milk"), TripletWrite(("Cy", "likes", "juice\ud800"))])
    assert store.count() == 1 and store.term_count() == 3
    assert [r.triplet for r in store.records()] == [Triplet("Bo", "likes", "coffee")]


@pytest.mark.parametrize("field", ["observation", "response", "summary"])
def test_a_lone_surrogate_in_an_scm_append_is_a_value_error_naming_the_field(field, tmp_path):
    stream = SCMStream(tmp_path / "s.db")
    stream.append("ana", "Hi", "Hello")
    turn = {"observation": "ok", "response": "ok", "summary": "", field: "cut \udc80 text"}
    with pytest.raises(ValueError, match=f"{field} contains .* lone surrogate .*errors='replace'"):
        stream.append("ana", turn["observation"], turn["response"], summary=turn["summary"])
    assert stream.count("ana") == 1 and stream.items("ana")[0].response == "Hello"


# ---------------------------------------------------------------------------------------- 4. bad database files
def _sqlite_file(path, journal: str) -> bytes:
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA journal_mode={journal}")
    conn.execute("CREATE TABLE t (x TEXT)")
    conn.executemany("INSERT INTO t VALUES (?)", [("v" * 100,)] * 3000)
    conn.commit()
    conn.close()
    return path.read_bytes()


def _openers(path):
    yield lambda: TripletStore(path, embedder=HashingEmbedder(dim=64))
    yield lambda: SCMStream(path)
    yield lambda: SQLiteBackend(path)


@pytest.mark.parametrize("content", [b"hello, these are my notes\n" * 50, b"\x00" * 4096, b"SQLite format"])
def test_a_non_sqlite_file_is_refused_and_left_unchanged(tmp_path, content):
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    for open_ in _openers(path):
        with pytest.raises(ValueError, match=r"notes\.txt.*is not a SQLite database.*left unchanged"):
            open_()
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("journal", ["WAL", "DELETE"])
@pytest.mark.parametrize("keep", [0.99, 0.5, 0.01])
def test_a_truncated_database_is_refused_and_left_unchanged(tmp_path, journal, keep):
    whole = _sqlite_file(tmp_path / "whole.db", journal)
    path = tmp_path / "cut.db"
    path.write_bytes(whole[: int(len(whole) * keep)])
    for open_ in _openers(path):
        with pytest.raises(ValueError, match=r"cut\.db.*(truncated|corrupt).*left unchanged"):
            open_()
    assert path.read_bytes() == whole[: int(len(whole) * keep)]


def test_a_directory_is_refused(tmp_path):
    for open_ in _openers(tmp_path):
        with pytest.raises(ValueError, match="is a directory"):
            open_()


def test_corruption_met_after_opening_is_a_clear_error(tmp_path):
    path = tmp_path / "t.db"
    _sqlite_file(path, "WAL")
    data = bytearray(path.read_bytes())
    data[4096:] = b"\xff" * (len(data) - 4096)  # every page but the first (header and schema) destroyed
    path.write_bytes(bytes(data))
    backend = SQLiteBackend(path)  # nothing read beyond the schema yet: opening succeeds
    with pytest.raises(ValueError, match=r"t\.db.*corrupt"), backend.read() as cur:
        cur.execute("SELECT COUNT(*) FROM t").fetchone()
    with backend.read() as cur:  # the connection is still usable (the failed transaction was rolled back)
        assert cur.execute("SELECT name FROM sqlite_master").fetchall() == [("t",)]
    backend.close()
    assert path.read_bytes() == bytes(data)


def test_healthy_files_still_open(tmp_path):
    _sqlite_file(tmp_path / "other.db", "DELETE")
    SQLiteBackend(tmp_path / "other.db").close()  # a valid database in rollback-journal mode
    (tmp_path / "empty.db").write_bytes(b"")  # SQLite treats an empty file as a new database
    with SCMStream(tmp_path / "empty.db") as stream:
        stream.append("s", "hi", "hello", embedding=np.ones(2))
    with SCMStream(tmp_path / "empty.db") as stream:
        assert stream.count("s") == 1


def test_an_scm_stream_refuses_another_applications_scm_items_table(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE scm_items (id INTEGER PRIMARY KEY, note TEXT)")
    conn.execute("INSERT INTO scm_items (note) VALUES ('keep me')")
    conn.commit()
    conn.close()
    with pytest.raises(ValueError, match=r"other\.db is not a FragRel SCM memory stream file .*\['scm_items'\]"):
        SCMStream(path)
    assert sqlite3.connect(path).execute("SELECT note FROM scm_items").fetchall() == [("keep me",)]


# ------------------------------------------------------------------------------------------ round 4 (issue 36)

SURROGATE = "caf\ud800e"


def _lc_store():
    pytest.importorskip("langgraph")
    from fragrel_integrations.langchain import TripletMemoryStore

    return TripletMemoryStore(embedder=HashingEmbedder(dim=32))


FACT = {"subject": "Ann", "relation": "lives in", "object": "Paris"}


def test_a_str_namespace_is_one_label_in_every_view_sync():
    store = _lc_store()
    store.put("ab", "k", FACT)
    assert store.get(("a", "b"), "k") is None  # never split into characters
    assert tuple(store.get("ab", "k").namespace) == ("ab",) and store.get(("ab",), "k") is not None
    assert [tuple(i.namespace) for i in store.search("ab")] == [("ab",)]
    assert store.search(("a",)) == [] and store.search("a") == []
    assert store.list_namespaces() == [("ab",)]
    assert store.list_namespaces(prefix="ab") == [("ab",)] and store.list_namespaces(prefix=("a",)) == []
    assert store.list_namespaces(suffix="ab") == [("ab",)] and store.list_namespaces(suffix="b") == []
    assert [(tuple(i.namespace), i.key) for i in store.search("ab", query="Ann")] == [(("ab",), "k")]
    store.delete(("a", "b"), "k")  # another namespace: nothing deleted
    assert store.get("ab", "k") is not None
    store.delete("ab", "k")
    assert store.get("ab", "k") is None and store.get(("ab",), "k") is None


async def test_a_str_namespace_is_one_label_in_every_view_async():
    store = _lc_store()
    await store.aput("cd", "k", FACT)
    assert await store.aget(("c", "d"), "k") is None
    assert tuple((await store.aget("cd", "k")).namespace) == ("cd",)
    assert [tuple(i.namespace) for i in await store.asearch("cd")] == [("cd",)]
    assert await store.alist_namespaces(prefix="cd") == [("cd",)]
    assert await store.alist_namespaces(prefix=("c",)) == []
    await store.adelete("cd", "k")
    assert await store.aget("cd", "k") is None


def test_the_kv_view_and_tools_keep_a_str_namespace_whole():
    store = _lc_store()
    kv = store.as_kv_store("ab")
    kv.mset([("k", Triplet("Ann", "likes", "tea"))])
    assert store.core.get("k", namespace=("ab",)) is not None and store.core.get("k", namespace=("a", "b")) is None


def test_a_lone_surrogate_is_a_value_error_naming_its_position_at_every_triplet_entry_point():
    store = TripletStore(embedder=HashingEmbedder(dim=32))
    store.write(Triplet("Ann", "lives in", "Paris"), key="k")
    calls = {
        "get": lambda: store.get(SURROGATE),
        "get_many": lambda: store.get_many(["k", SURROGATE]),
        "delete": lambda: store.delete(SURROGATE),
        "read": lambda: store.read(SURROGATE, "lives in"),
        "search": lambda: store.search(SURROGATE),
        "namespace": lambda: store.records(namespace=("x", SURROGATE)),
        "get_nodes": lambda: store.get_nodes([SURROGATE]),
        "delete_nodes": lambda: store.delete_nodes([SURROGATE]),
    }
    for call in calls.values():
        with pytest.raises(ValueError, match="position 3, a lone surrogate"):
            call()
    assert store.count() == 1  # nothing lost


def test_a_lone_surrogate_in_the_langgraph_and_graph_stores_is_a_value_error():
    store = _lc_store()
    for call in (
        lambda: store.put(("x",), "k", {**FACT, "object": SURROGATE}),
        lambda: store.get(("x",), SURROGATE),
        lambda: store.search(("x",), query=SURROGATE),
        lambda: store.put((SURROGATE,), "k", FACT),
    ):
        with pytest.raises(ValueError, match="position 3, a lone surrogate"):
            call()
    pytest.importorskip("llama_index.core")
    from llama_index.core.graph_stores.types import EntityNode, Relation
    from llama_index.core.vector_stores.types import VectorStoreQuery

    from fragrel_integrations.llama_index import TripletGraphStore

    graph = TripletGraphStore(embedder=HashingEmbedder(dim=32))
    for call in (
        lambda: graph.upsert_nodes([EntityNode(name=SURROGATE)]),
        lambda: graph.upsert_relations([Relation(label="likes", source_id="Ann", target_id=SURROGATE)]),
        lambda: graph.get(ids=[SURROGATE]),
        lambda: graph.get_rel_map([EntityNode(name=SURROGATE)]),
        lambda: graph.vector_query(VectorStoreQuery(query_str=SURROGATE, similarity_top_k=2)),
    ):
        with pytest.raises(ValueError, match="position 3, a lone surrogate"):
            call()
