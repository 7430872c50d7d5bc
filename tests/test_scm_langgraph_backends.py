"""SCM's stream on the LangGraph stores users scale out on: langgraph's ``SqliteStore`` (a file) and
``PostgresStore`` (a throw-away PostgreSQL server, see ``_pg_server``): record and prepare through the core memory,
the middleware in a ``create_agent`` agent sharing the agent's store, and two processes writing one session in
turn, each recalling what the other wrote."""

from __future__ import annotations

import contextlib
import itertools
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("langchain")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from test_scm_langgraph_store import RecordingChatModel, controller

import fragrel_integrations
from fragrel_integrations.core.scm import SelfControlledMemory
from fragrel_integrations.langchain.scm_middleware import SCMMiddleware
from fragrel_integrations.langchain.scm_store import LangGraphStoreStream
from fragrel_integrations.testing import HashingEmbedder

ROOT = Path(fragrel_integrations.__file__).resolve().parent.parent
_DBS = itertools.count()

# What a second process runs: open the same store, write one turn, print what it recalls for a question.
CHILD = """
import sys
from fragrel_integrations.core.scm import SelfControlledMemory
from fragrel_integrations.langchain.scm_store import LangGraphStoreStream
from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel

kind, target, observation, response, question = sys.argv[1:6]
if kind == "sqlite":
    from langgraph.store.sqlite import SqliteStore as Store
else:
    from langgraph.store.postgres import PostgresStore as Store
controller = ScriptedChatModel(lambda m: "Yes." if "yes or no" in m[-1]["content"] else "A summary.")
with Store.from_conn_string(target) as store:
    memory = SelfControlledMemory(controller, stream=LangGraphStoreStream(store), embedder=HashingEmbedder(dim=64))
    memory.record(observation, response, session_id="shared")
    print(memory.prepare(question, session_id="shared").block)
"""


def _child(kind: str, target: str, observation: str, response: str, question: str) -> str:
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD), kind, target, observation, response, question],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


@contextlib.contextmanager
def open_store(kind: str, tmp_path):
    """(store, target) for ``kind``: a SqliteStore on a new file, or a PostgresStore on a new database."""
    if kind == "sqlite":
        pytest.importorskip("langgraph.store.sqlite")
        from langgraph.store.sqlite import SqliteStore

        target = str(tmp_path / "store.sqlite")
        with SqliteStore.from_conn_string(target) as store:
            store.setup()
            yield store, target
        return
    pytest.importorskip("langgraph.store.postgres")
    from _triplet_fixtures import get_pg, pg_skip_reason
    from langgraph.store.postgres import PostgresStore

    reason = pg_skip_reason()
    if reason:
        pytest.skip(reason)
    import psycopg

    base = get_pg().url
    name = f"lgstore_{next(_DBS)}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    target = base.rsplit("/", 1)[0] + "/" + name
    with PostgresStore.from_conn_string(target) as store:
        store.setup()
        yield store, target


KINDS = ["sqlite", "postgres"]


@pytest.mark.parametrize("kind", KINDS)
def test_record_and_prepare_on_the_store(kind, tmp_path):
    with open_store(kind, tmp_path) as (store, _):
        memory = SelfControlledMemory(
            controller(), stream=LangGraphStoreStream(store), embedder=HashingEmbedder(dim=64), k=2
        )
        memory.record("My cat is called Miso.", "Nice name!", session_id="ana")
        memory.record("I live in Lisbon.", "Lovely city.", session_id="ana")
        memory.record("Hello", "Hi", session_id="bo")
        context = memory.prepare("What is my cat called?", session_id="ana")
        assert context.flash.index == 1 and [m.item.index for m in context.memories] == [0]
        assert "Miso" in context.block and "Hello" not in context.block
        assert [i.index for i in memory.history("ana")] == [0, 1]
        assert sorted(memory.stream.sessions()) == ["ana", "bo"]
        assert memory.clear("bo") == 1 and memory.history("bo") == []


@pytest.mark.parametrize("kind", KINDS)
def test_middleware_in_an_agent_sharing_the_store(kind, tmp_path):
    with open_store(kind, tmp_path) as (store, _):
        middleware = SCMMiddleware(model=controller(), store=store, embedder=HashingEmbedder(dim=64), session_id="a")
        model = RecordingChatModel(messages=iter([AIMessage("Nice name!"), AIMessage("Ok."), AIMessage("Miso.")]))
        agent = create_agent(model, middleware=[middleware], store=store)
        for text in ("My cat is called Miso.", "I live in Lisbon.", "What is my cat called?"):
            agent.invoke({"messages": [HumanMessage(text)]})
        system = [m for m in model.seen[-1] if isinstance(m, SystemMessage)]
        assert system and "My cat is called Miso." in system[0].text
        keys = sorted(i.key for i in store.search(("fragrel", "scm", "a"), limit=100))
        assert [key[:10] for key in keys] == ["0000000000", "0000000001", "0000000002"]  # slot, then a suffix


@pytest.mark.parametrize("kind", KINDS)
def test_two_processes_write_one_session_in_turn_and_recall_each_other(kind, tmp_path):
    with open_store(kind, tmp_path) as (store, target):
        stream = LangGraphStoreStream(store)
        memory = SelfControlledMemory(controller(), stream=stream, embedder=HashingEmbedder(dim=64))
        # process B writes first and recalls nothing of A's yet
        block = _child(kind, target, "My cat is called Miso.", "Nice name!", "Where do I live?")
        assert "Lisbon" not in block
        # this process (A) sees B's turn, adds its own
        assert [i.observation for i in memory.history("shared")] == ["My cat is called Miso."]
        memory.record("I live in Lisbon.", "Lovely city.", session_id="shared")
        # a new process C recalls A's turn and B's (the flash memory is A's, the last before C's own)
        block = _child(kind, target, "I like green tea.", "Noted.", "What is my cat called and where do I live?")
        assert "Miso" in block and "Lisbon" in block
        # and A sees all three turns, indexed in order without a gap or a reuse
        items = memory.history("shared")
        assert [i.index for i in items] == [0, 1, 2]
        assert [i.observation for i in items] == ["My cat is called Miso.", "I live in Lisbon.", "I like green tea."]
        context = memory.prepare("What do I like to drink?", session_id="shared")
        assert context.flash.observation == "I like green tea."
