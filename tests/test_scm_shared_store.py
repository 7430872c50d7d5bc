"""SCM on one shared LangGraph store: no turn is lost when several stream objects, threads or processes append to
one session, and no run is ever given another user's session (issue 25, round 3)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("langchain")
pytest.importorskip("langgraph.store.memory")

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.store.base import BaseStore, PutOp
from langgraph.store.memory import InMemoryStore
from pydantic import Field

from fragrel_integrations.adapters.keyed_stream import new_key, turn_value
from fragrel_integrations.langchain.scm_middleware import SCMMiddleware
from fragrel_integrations.langchain.scm_store import LangGraphStoreStream
from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel

NS = ("fragrel", "scm")
ROOT = Path(__file__).resolve().parents[1]


def controller() -> ScriptedChatModel:
    return ScriptedChatModel(lambda m: "Yes." if "yes or no" in m[-1]["content"] else "A summary.")


class SlowStore(InMemoryStore):
    """An InMemoryStore that takes 2 ms per call, as a networked PostgresStore does: races get room to happen."""

    def batch(self, ops):
        time.sleep(0.002)
        return super().batch(ops)


class Recording(GenericFakeChatModel):
    seen: list = Field(default_factory=list)

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.seen.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


# ------------------------------------------------------------------------------------------ one process


def test_two_middlewares_on_one_slow_store_lose_no_turn():
    store = SlowStore()
    middlewares = [SCMMiddleware(model=controller(), store=store, embedder=HashingEmbedder(dim=16)) for _ in range(2)]

    def work(t: int) -> None:
        memory = middlewares[t % 2].memory
        for i in range(10):
            memory.record(f"t{t} turn {i}", "ok", session_id="s")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    fresh = LangGraphStoreStream(store).items("s")
    assert len(fresh) == 80 and [i.index for i in fresh] == list(range(80))
    assert sorted(i.observation for i in fresh) == sorted(f"t{t} turn {i}" for t in range(8) for i in range(10))
    for middleware in middlewares:  # each object's cached view agrees with a fresh read
        assert [i.observation for i in middleware.memory.history("s")] == [i.observation for i in fresh]


def test_many_stream_objects_threads_get_consecutive_indices():
    store = SlowStore()
    returned: list[int] = []

    def work(t: int) -> None:
        stream = LangGraphStoreStream(store)  # one object per request, as a web server builds it
        for i in range(5):
            returned.append(stream.append("s", f"t{t} {i}", "r").index)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(returned) == list(range(30))
    assert [i.index for i in LangGraphStoreStream(store).items("s")] == list(range(30))


def test_a_slot_claimed_twice_keeps_both_turns_in_one_order_for_every_reader():
    store = InMemoryStore()
    mine = LangGraphStoreStream(store)
    for i in range(3):
        mine.append("s", f"mine {i}", "r")
    assert len(mine.items("s")) == 3
    # another process claimed slot 2 at the same moment (it had not seen our write): both writes stay
    racer = {"observation": "theirs", "response": "r", "summary": "", "embedding": None}
    store.put(
        (*NS, "s"),
        "0000000002-" + "f" * 32,
        {**racer, "created": time.time(), "index": 2, "seq": "0000000002"},
        index=False,
    )
    cached = [i.observation for i in mine.items("s")]
    fresh = [i.observation for i in LangGraphStoreStream(store).items("s")]
    assert cached == fresh == ["mine 0", "mine 1", "mine 2", "theirs"]
    # a late write that sorts before our last item: the cached reader notices and re-reads in order
    store.put(
        (*NS, "s"),
        "0000000001-" + "e" * 32,
        {**racer, "observation": "late", "created": 0.0, "index": 1, "seq": "0000000001"},
    )
    assert [i.observation for i in mine.items("s")] == [i.observation for i in LangGraphStoreStream(store).items("s")]
    assert [i.index for i in mine.items("s")] == list(range(5))
    assert mine.append("s", "next", "r").index == 5 and mine.count("s") == 6


def test_a_writer_that_stalled_past_several_turns_is_seen_by_a_cached_reader():
    # Process A read the session at 2 turns and stalled; B wrote 6 more; A then wrote its turn at slot 2, far
    # below the last slot a cached reader holds: every reader (cached or fresh) must still see A's turn.
    store = InMemoryStore()
    reader, writer = LangGraphStoreStream(store), LangGraphStoreStream(store)
    for i in range(2):
        writer.append("s", f"b {i}", "r")
    assert len(reader.items("s")) == 2
    for i in range(2, 8):
        writer.append("s", f"b {i}", "r")
    assert len(reader.items("s")) == 8  # the reader's cache now ends at slot 7
    stalled = turn_value("a late", "r", "", None, 2)
    store.put((*NS, "s"), new_key(2), stalled, index=False)
    cached = [i.observation for i in reader.items("s")]
    fresh = [i.observation for i in LangGraphStoreStream(store).items("s")]
    assert "a late" in cached and cached == fresh
    assert [i.index for i in reader.items("s")] == list(range(9))


def test_items_written_by_the_earlier_key_layout_are_read_and_followed():
    store = InMemoryStore()
    for i in range(3):  # the layout of the previous release: ten digits, no suffix, no "seq"
        value = {"observation": f"old {i}", "response": "r", "summary": "", "embedding": None, "created": float(i)}
        store.put((*NS, "s"), f"{i:010d}", {**value, "index": i}, index=False)
    stream = LangGraphStoreStream(store)
    assert [i.observation for i in stream.items("s")] == ["old 0", "old 1", "old 2"]
    assert stream.append("s", "new", "r").index == 3
    assert [i.observation for i in LangGraphStoreStream(store).items("s")] == ["old 0", "old 1", "old 2", "new"]


# ------------------------------------------------------------------------------------------ processes

WRITER = textwrap.dedent(
    """
    import sys, json
    from fragrel_integrations.langchain.scm_store import LangGraphStoreStream
    kind, where, name, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if kind == "sqlite":
        import sqlite3
        from langgraph.store.sqlite import SqliteStore
        conn = sqlite3.connect(where, check_same_thread=False, isolation_level=None, timeout=60)
        store = SqliteStore(conn)
    else:
        from psycopg import Connection
        from psycopg.rows import dict_row
        from langgraph.store.postgres import PostgresStore
        conn = Connection.connect(where, autocommit=True, prepare_threshold=0, row_factory=dict_row)
        store = PostgresStore(conn)
    stream = LangGraphStoreStream(store)
    print("ready", flush=True)
    sys.stdin.readline()  # start together
    for i in range(n):
        stream.append("s", f"{name} {i}", "r")
    print(json.dumps([i.observation for i in stream.items("s")]), flush=True)
    """
)


def _two_writers(kind: str, where: str, setup) -> list[str]:
    setup()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, kind, where, name, "25"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
    expected = sorted(f"{name} {i}" for name in ("a", "b") for i in range(25))
    assert sorted(outs[-1]) == expected or sorted(outs[0]) == expected  # the writer that ended last saw all 50
    return expected


def test_two_processes_on_a_sqlite_store_lose_no_turn(tmp_path):
    sqlite_store = pytest.importorskip("langgraph.store.sqlite")
    import sqlite3

    path = str(tmp_path / "store.sqlite")

    def setup():
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        sqlite_store.SqliteStore(conn).setup()
        conn.close()

    expected = _two_writers("sqlite", path, setup)
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    items = LangGraphStoreStream(sqlite_store.SqliteStore(conn)).items("s")
    assert sorted(i.observation for i in items) == expected and [i.index for i in items] == list(range(50))
    for name in ("a", "b"):  # each writer's turns keep their own order
        mine = [i.observation for i in items if i.observation.startswith(name + " ")]
        assert mine == [f"{name} {i}" for i in range(25)]
    conn.close()


def test_two_processes_on_a_postgres_store_lose_no_turn():
    postgres_store = pytest.importorskip("langgraph.store.postgres")
    pytest.importorskip("psycopg")
    sys.path.insert(0, str(Path(__file__).parent))
    from _pg_server import TemporaryPostgres, find_pg_bin

    if find_pg_bin() is None:
        pytest.skip("PostgreSQL server binaries are not installed (apt-get install -y postgresql)")
    from psycopg import Connection
    from psycopg.rows import dict_row

    with TemporaryPostgres(fsync=False) as pg:

        def connect():
            return Connection.connect(pg.url, autocommit=True, prepare_threshold=0, row_factory=dict_row)

        def setup():
            with connect() as conn:
                postgres_store.PostgresStore(conn).setup()

        expected = _two_writers("postgres", pg.url, setup)
        with connect() as conn:
            items = LangGraphStoreStream(postgres_store.PostgresStore(conn)).items("s")
    assert sorted(i.observation for i in items) == expected and [i.index for i in items] == list(range(50))


# ------------------------------------------------------------------------------------------ session identity


def _agent(middleware: SCMMiddleware, *replies: str):
    model = Recording(messages=iter([AIMessage(r) for r in replies]))
    return create_agent(model, middleware=[middleware], context_schema=dict), model


@pytest.mark.parametrize(
    ("bad", "error", "match"),
    [(42, TypeError, "must be a non-empty str"), ("", ValueError, "empty"), ("  ", ValueError, "empty")],
)
def test_a_bad_session_id_in_the_context_is_an_error_never_a_shared_session(bad, error, match):
    middleware = SCMMiddleware(model=controller(), embedder=HashingEmbedder(dim=16))
    agent, model = _agent(middleware, "Noted.", "Hi.")
    agent.invoke({"messages": [{"role": "user", "content": "I like mango."}]}, context={"session_id": "42"})
    with pytest.raises(error, match=match):
        agent.invoke({"messages": [{"role": "user", "content": "What do I like?"}]}, context={"session_id": bad})
    assert len(model.seen) == 1  # the bad run never reached the model with anyone's memory
    assert middleware.memory.stream.sessions() == ["42"]


def test_a_run_with_no_session_is_an_error_naming_the_fix():
    middleware = SCMMiddleware(model=controller(), embedder=HashingEmbedder(dim=16))
    agent, _ = _agent(middleware, "Hi.")
    with pytest.raises(ValueError, match=r"context=.*session_id.*thread_id.*SCMMiddleware\(session_id="):
        agent.invoke({"messages": [{"role": "user", "content": "Hello"}]})
    with pytest.raises(ValueError, match="cannot tell whose conversation"):
        middleware.resolve_session(None)


def test_users_in_contexts_and_integer_thread_ids_stay_apart():
    middleware = SCMMiddleware(model=controller(), embedder=HashingEmbedder(dim=16))
    agent, model = _agent(middleware, "Noted.", "Noted.", "You like?")
    agent.invoke({"messages": [{"role": "user", "content": "I like mango."}]}, context={"session_id": "user-42"})
    agent.invoke({"messages": [{"role": "user", "content": "I like kiwi."}]}, config={"configurable": {"thread_id": 7}})
    agent.invoke({"messages": [{"role": "user", "content": "What do I like?"}]}, context={"session_id": "user-43"})
    assert "mango" not in str(model.seen[-1]) and "kiwi" not in str(model.seen[-1])
    assert middleware.memory.stream.sessions() == ["7", "user-42", "user-43"]
    assert np.all([i.session_id == "user-42" for i in middleware.memory.history("user-42")])


def test_a_lone_surrogate_in_a_session_id_is_refused_before_anything_is_written():
    stream = LangGraphStoreStream(InMemoryStore())
    with pytest.raises(ValueError, match=r"session_id contains .* lone surrogate"):
        stream.append("ana\ud800", "hi", "hello")
    middleware = SCMMiddleware(model=controller(), embedder=HashingEmbedder(dim=16))
    with pytest.raises(ValueError, match="lone surrogate"):
        middleware.memory.record("hi", "hello", session_id="bo\udfff")
    assert stream.sessions() == [] and middleware.memory.stream.sessions() == []


# ------------------------------------------------------------------------------------------ round 4 (issue 36)


class _Delegate(BaseStore):
    """Another process's view of ``inner`` (its own object, so its own lock); ``before_put`` runs once before
    its next write lands: the stall during which other writers get ahead."""

    def __init__(self, inner, before_put=None) -> None:
        self.inner, self.before_put = inner, before_put

    def batch(self, ops):
        ops = list(ops)
        if self.before_put is not None and any(isinstance(op, PutOp) and op.value is not None for op in ops):
            hook, self.before_put = self.before_put, None
            hook()
        return self.inner.batch(ops)

    async def abatch(self, ops):
        return self.batch(ops)


@pytest.mark.parametrize("behind", [61.0, 3600.0, 86400.0 * 30])
def test_a_stalled_writer_with_a_clock_far_behind_is_seen_by_a_cached_reader(monkeypatch, behind):
    from types import SimpleNamespace

    from fragrel_integrations.adapters import keyed_stream

    store = InMemoryStore()
    reader, others = LangGraphStoreStream(store), LangGraphStoreStream(store)
    for i in range(2):
        others.append("s", f"b {i}", "r")
    assert len(reader.items("s")) == 2

    def stall() -> None:  # while the skewed writer waits, others write 6 turns and the reader caches them
        for i in range(2, 8):
            others.append("s", f"b {i}", "r")
        assert len(reader.items("s")) == 8

    real_value = keyed_stream.turn_value

    def skewed_value(*args, **kwargs):  # the writer's clock is `behind` seconds late (injected, no sleep)
        with monkeypatch.context() as m:
            m.setattr(keyed_stream, "time", SimpleNamespace(time=lambda: time.time() - behind))
            return real_value(*args, **kwargs)

    monkeypatch.setattr(keyed_stream, "turn_value", skewed_value)
    writer = LangGraphStoreStream(_Delegate(store, stall))
    writer.append("s", "a late", "r")
    monkeypatch.setattr(keyed_stream, "turn_value", real_value)
    cached = [i.observation for i in reader.items("s")]
    fresh = [i.observation for i in LangGraphStoreStream(store).items("s")]
    assert "a late" in cached and cached == fresh and len(cached) == 9
    # a raw late write (another process's layout, a stamp from a clock a month behind) is seen too
    stale = real_value("raw late", "r", "", None, 1)
    store.put((*NS, "s"), new_key(1), {**stale, "written": "0" * 17, "created": 1.0}, index=False)
    assert [i.observation for i in reader.items("s")] == [i.observation for i in LangGraphStoreStream(store).items("s")]
    assert "raw late" in [i.observation for i in reader.items("s")]


def test_two_named_middlewares_on_one_store_each_own_their_stream():
    store = InMemoryStore()
    options = {"model": controller(), "store": store, "embedder": HashingEmbedder(dim=16)}
    work, home = SCMMiddleware(name="work", **options), SCMMiddleware(name="home", **options)
    default = SCMMiddleware(**options)
    work.memory.record("the deadline is Friday", "noted", session_id="s")
    home.memory.record("the cat is called Tom", "noted", session_id="s")
    default.memory.record("plain", "ok", session_id="s")
    assert [i.observation for i in work.memory.history("s")] == ["the deadline is Friday"]
    assert [i.observation for i in home.memory.history("s")] == ["the cat is called Tom"]
    assert [i.observation for i in default.memory.history("s")] == ["plain"]  # the default keeps its namespace
    assert LangGraphStoreStream(store).items("s")[0].observation == "plain"
    spaces = {tuple(ns) for ns in store.list_namespaces()}
    assert spaces == {("fragrel", "scm:work", "s"), ("fragrel", "scm:home", "s"), ("fragrel", "scm", "s")}
    # sharing is explicit: the same namespace, as a str (one label) or a tuple
    a = SCMMiddleware(name="a", namespace="team", **options)
    b = SCMMiddleware(name="b", namespace=("team",), **options)
    a.memory.record("shared fact", "ok", session_id="s")
    assert [i.observation for i in b.memory.history("s")] == ["shared fact"]
    with pytest.raises(ValueError, match=r"namespace= .* with store="):
        SCMMiddleware(model=controller(), namespace="x")
    with pytest.raises(ValueError, match="labels"):
        SCMMiddleware(name="a", namespace=("a.b",), **options)


def test_two_named_middlewares_in_one_agent_do_not_store_each_turn_twice():
    store = InMemoryStore()
    options = {"model": controller(), "store": store, "embedder": HashingEmbedder(dim=16)}
    middlewares = [SCMMiddleware(name="work", **options), SCMMiddleware(name="home", **options)]
    agent = create_agent(GenericFakeChatModel(messages=iter([AIMessage("hello")] * 4)), middleware=middlewares)
    agent.invoke({"messages": [("user", "hi there")]}, {"configurable": {"thread_id": "t1"}})
    for middleware in middlewares:
        assert [i.observation for i in middleware.memory.history("t1")] == ["hi there"]
