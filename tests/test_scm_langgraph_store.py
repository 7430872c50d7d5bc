"""The SCM memory stream in a LangGraph store: ``LangGraphStoreStream`` against the ``MemoryStream`` protocol, the
core memory on top of it, and ``SCMMiddleware(store=...)`` in a ``create_agent`` agent sharing the agent's store."""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("langchain")
pytest.importorskip("langgraph.store.memory")

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langgraph.store.memory import InMemoryStore
from pydantic import Field

from fragrel_integrations.adapters.keyed_stream import stamp
from fragrel_integrations.core.scm import MemoryStream, SCMStream, SelfControlledMemory
from fragrel_integrations.langchain import scm_store
from fragrel_integrations.langchain.scm_middleware import SCMMiddleware
from fragrel_integrations.langchain.scm_store import DEFAULT_NAMESPACE, LangGraphStoreStream
from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel

NS = ("fragrel", "scm")


def controller() -> ScriptedChatModel:
    """Says yes to every yes/no question; every summary is the first words of the user line."""

    def respond(messages):
        text = messages[-1]["content"]
        if "yes or no" in text:
            return "Yes."
        user = next((line for line in text.splitlines() if line.startswith("User: ")), "User: ?")
        return "Summary: " + user[6:]

    return ScriptedChatModel(respond)


class RecordingChatModel(GenericFakeChatModel):
    """GenericFakeChatModel that records the messages of every call."""

    seen: list = Field(default_factory=list)

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.seen.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def keys(store: InMemoryStore, session: str) -> list[str]:
    """The stream's keys of one session in the stream's order (slot, then created, then key)."""
    items = [it for it in store.search((*NS, session), limit=10_000) if it.key[:1].isdigit()]
    return [it.key for it in sorted(items, key=lambda it: (it.value["index"], it.value["created"], it.key))]


def fill(stream: LangGraphStoreStream, session: str, n: int, dim: int = 3) -> None:
    for i in range(n):
        stream.append(session, f"obs {i}", f"resp {i}", summary=f"sum {i}", embedding=np.full(dim, i + 0.25))


# ------------------------------------------------------------------------------------------ protocol


def test_public_names_and_protocol():
    assert scm_store.__all__ == ["DEFAULT_NAMESPACE", "LangGraphStoreStream"]
    assert DEFAULT_NAMESPACE == NS
    stream = LangGraphStoreStream(InMemoryStore())
    assert isinstance(stream, MemoryStream)
    with SCMStream(":memory:") as sqlite:
        assert isinstance(sqlite, MemoryStream)
    assert not isinstance(object(), MemoryStream)
    assert repr(stream) == "LangGraphStoreStream(InMemoryStore, namespace=('fragrel', 'scm'))"


# ------------------------------------------------------------------------------------------ stream


def test_append_items_last_count_and_store_layout():
    store = InMemoryStore()
    stream = LangGraphStoreStream(store)
    assert stream.items("s") == [] and stream.last("s") is None and stream.count("s") == 0
    assert stream.sessions() == []
    first = stream.append("s", "obs", "resp", summary="sum", embedding=np.array([0.5, -1.0, 2.0]))
    second = stream.append("s", "obs2", "resp2")
    assert (first.index, second.index) == (0, 1) and second.embedding is None
    assert first.embedding.dtype == np.float32 and not first.embedding.flags.writeable
    items = stream.items("s")
    assert [i.index for i in items] == [0, 1] and [i.observation for i in items] == ["obs", "obs2"]
    assert items[0].embedding.tolist() == [0.5, -1.0, 2.0] and items[0].summary == "sum"
    assert items[0].created == first.created and items[0].session_id == "s"
    assert stream.last("s").observation == "obs2" and stream.count("s") == 2 and stream.sessions() == ["s"]
    first_key, second_key = keys(store, "s")
    assert first_key.startswith("0000000000-") and second_key.startswith("0000000001-")
    stored = store.get((*NS, "s"), first_key)
    assert stored.value == {
        "observation": "obs",
        "response": "resp",
        "summary": "sum",
        "embedding": [0.5, -1.0, 2.0],
        "created": first.created,
        "index": 0,
        "seq": "0000000000",
        "written": stamp(first.created),
    }
    assert store.get((*NS, "s"), second_key).value["embedding"] is None


@pytest.mark.parametrize("n", [11, 250])
def test_items_page_past_the_search_default_limit(n):
    store = InMemoryStore()
    stream = LangGraphStoreStream(store)
    fill(stream, "s", n)
    assert len(store.search((*NS, "s"))) == 10  # the store's default page
    items = stream.items("s")
    assert [i.index for i in items] == list(range(n))
    assert [i.observation for i in items] == [f"obs {i}" for i in range(n)]
    assert stream.count("s") == n and stream.last("s").index == n - 1
    assert stream.clear("s") == n and stream.count("s") == 0 and stream.sessions() == []


def test_small_pages_and_a_fresh_stream_on_the_same_store():
    store = InMemoryStore()
    fill(LangGraphStoreStream(store, page_size=7), "s", 30)
    other = LangGraphStoreStream(store, page_size=7)  # no cache: the next index comes from the store
    assert other.append("s", "next", "reply").index == 30
    assert [i.index for i in other.items("s")] == list(range(31))


def test_sessions_are_isolated_and_listed_past_one_page():
    stream = LangGraphStoreStream(InMemoryStore(), page_size=10)
    fill(stream, "ana", 3)
    fill(stream, "an", 2)  # a prefix of another session id
    fill(stream, "bo", 1)
    assert [i.observation for i in stream.items("an")] == ["obs 0", "obs 1"]
    assert stream.count("ana") == 3 and stream.count("bo") == 1
    assert stream.clear("an") == 2 and stream.count("ana") == 3
    assert stream.sessions() == ["ana", "bo"]
    for i in range(25):
        stream.append(f"user-{i:02d}", "hi", "hello")
    assert stream.sessions() == ["ana", "bo", *[f"user-{i:02d}" for i in range(25)]]


def test_session_ids_with_periods_and_percent_signs_round_trip():
    store = InMemoryStore()
    stream = LangGraphStoreStream(store)
    for session in ("a.b", "a%2Eb", "50%", "x\x00y"):
        stream.append(session, session, "ok")
    assert sorted(stream.sessions()) == sorted(["a.b", "a%2Eb", "50%", "x\x00y"])
    assert [i.observation for i in stream.items("a.b")] == ["a.b"]
    assert [i.observation for i in stream.items("a%2Eb")] == ["a%2Eb"]
    assert [it.value["observation"] for it in store.search((*NS, "a%2Eb"))] == ["a.b"]


def test_index_assignment_after_clear_and_after_other_writers():
    store = InMemoryStore()
    stream = LangGraphStoreStream(store)
    fill(stream, "s", 5)
    assert stream.clear("s") == 5 and stream.clear("s") == 0
    assert stream.append("s", "again", "r").index == 0
    # another stream (another worker on the same store) appends and clears behind this one's cache
    other = LangGraphStoreStream(store)
    assert other.append("s", "o1", "r").index == 1
    assert stream.append("s", "mine", "r").index == 2
    assert stream.last("s").observation == "mine"
    other.clear("s")
    assert stream.append("s", "fresh", "r").index == 0
    fill(other, "s", 3)  # indices 1..3
    assert stream.last("s").index == 3 and stream.append("s", "tail", "r").index == 4


class CountingStore(InMemoryStore):
    """InMemoryStore that records the operation types of every ``batch`` call."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.calls: list[list[str]] = []

    def batch(self, ops):
        ops = list(ops)
        self.calls.append([type(op).__name__ for op in ops])
        return super().batch(ops)


def test_items_are_cached_and_only_new_keys_are_read():
    store = CountingStore()
    stream = LangGraphStoreStream(store, page_size=50)
    fill(stream, "s", 120)
    first = stream.items("s")
    assert [i.index for i in first] == list(range(120))
    store.calls.clear()
    again = stream.items("s")
    assert again is not first and all(a is b for a, b in zip(again, first, strict=True))  # decoded once
    # one batch: the first and last cached items by key, and a search for what was written since the last one
    assert store.calls == [["GetOp", "GetOp", "SearchOp", "SearchOp"]]  # the next turns, the count past the cache
    stream.append("s", "new", "reply", embedding=np.ones(3))
    store.calls.clear()
    items = stream.items("s")
    assert [i.index for i in items] == list(range(121)) and items[-1].observation == "new"
    assert all(a is b for a, b in zip(items[:120], first, strict=True))
    assert store.calls == [["GetOp", "GetOp", "SearchOp", "SearchOp"]]  # the next turns, the count past the cache
    items.append("not stored")  # the caller's list is a copy
    assert len(stream.items("s")) == 121


def test_cache_sees_items_appended_by_another_stream_object():
    store = InMemoryStore()
    mine, other = LangGraphStoreStream(store, page_size=16), LangGraphStoreStream(store)
    fill(mine, "s", 3)
    assert [i.index for i in mine.items("s")] == [0, 1, 2]
    other.append("s", "theirs", "r")
    assert [i.observation for i in mine.items("s")] == ["obs 0", "obs 1", "obs 2", "theirs"]
    fill(other, "s", 70)  # more than one block of following keys (blocks grow 8, 16, then page_size)
    items = mine.items("s")
    assert [i.index for i in items] == list(range(74))
    assert [i.observation for i in items[4:]] == [f"obs {i}" for i in range(70)]
    fresh = LangGraphStoreStream(store).items("s")  # a fresh object (a full read) agrees
    assert [(i.index, i.observation, i.created) for i in items] == [(i.index, i.observation, i.created) for i in fresh]
    assert mine.append("s", "mine", "r").index == 74 and other.last("s").observation == "mine"


def test_cache_is_dropped_after_a_clear_by_another_stream_object():
    store = InMemoryStore()
    mine, other = LangGraphStoreStream(store), LangGraphStoreStream(store)
    fill(mine, "s", 5)
    assert len(mine.items("s")) == 5
    assert other.clear("s") == 5
    assert mine.items("s") == [] and mine.count("s") == 0
    # cleared and refilled with fewer turns: the cached last item (index 4) is gone
    fill(mine, "s", 5)
    mine.items("s")
    other.clear("s")
    other.append("s", "after clear", "r")
    assert [i.observation for i in mine.items("s")] == ["after clear"]
    # cleared and refilled with more turns: the keys exist again but are other writes (created differs)
    fill(mine, "s", 2)
    assert len(mine.items("s")) == 3
    other.clear("s")
    for i in range(6):
        other.append("s", f"new {i}", "r")
    assert [i.observation for i in mine.items("s")] == [f"new {i}" for i in range(6)]


def test_cache_notices_a_rewritten_first_or_last_item():
    store = InMemoryStore()
    stream = LangGraphStoreStream(store)
    fill(stream, "s", 4)
    stream.items("s")
    # another process took the same index at the same moment and its write replaced ours
    first, last = keys(store, "s")[0], keys(store, "s")[-1]
    value = dict(store.get((*NS, "s"), last).value, observation="theirs", created=1.5)
    store.put((*NS, "s"), last, value, index=False)
    assert stream.items("s")[-1].observation == "theirs"
    value = dict(store.get((*NS, "s"), first).value, observation="first", created=2.5)
    store.put((*NS, "s"), first, value, index=False)
    assert stream.items("s")[0].observation == "first"


def test_a_deletion_in_the_middle_is_seen_after_close():
    store = InMemoryStore()
    stream = LangGraphStoreStream(store)
    fill(stream, "s", 5)
    stream.items("s")
    store.delete((*NS, "s"), keys(store, "s")[2])  # not something the stream does: the cache still has the turn
    assert [i.index for i in stream.items("s")] == [0, 1, 2, 3, 4]
    stream.close()
    items = stream.items("s")  # an index is a position in the session, so the turns after it move up
    assert [i.observation for i in items] == ["obs 0", "obs 1", "obs 3", "obs 4"]
    assert [i.index for i in items] == [0, 1, 2, 3]


def test_no_cache_on_a_store_with_a_default_ttl():
    class TTLStore(CountingStore):
        supports_ttl = True  # the items do not really expire here; only the stream's choice is checked

    store = TTLStore()
    store.ttl_config = {"default_ttl": 60.0}
    stream = LangGraphStoreStream(store)
    fill(stream, "s", 3)
    assert len(stream.items("s")) == 3
    store.calls.clear()
    store.delete((*NS, "s"), keys(store, "s")[1])  # as an expiry would
    assert [i.observation for i in stream.items("s")] == ["obs 0", "obs 2"]
    assert any("SearchOp" in c for c in store.calls)  # read in full


def test_reads_while_another_thread_appends():
    store = InMemoryStore()
    writer, reader = LangGraphStoreStream(store), LangGraphStoreStream(store)
    seen: list[list[int]] = []

    def write() -> None:
        for i in range(60):
            writer.append("s", f"w {i}", "r")

    thread = threading.Thread(target=write)
    thread.start()
    while thread.is_alive():
        seen.append([i.index for i in reader.items("s")])
    thread.join()
    assert all(indices == list(range(len(indices))) for indices in seen)
    assert [i.observation for i in reader.items("s")] == [f"w {i}" for i in range(60)]


def test_namespace_option_and_foreign_items_are_ignored():
    store = InMemoryStore()
    stream = LangGraphStoreStream(store, namespace=("app", "memories"))
    stream.append("s", "a", "b")
    store.put(("app", "memories", "s"), "notes", {"text": "not a turn"}, index=False)
    store.put(("app", "memories", "s", "deeper"), "0000000000", {"text": "not a turn"}, index=False)
    assert [i.observation for i in stream.items("s")] == ["a"] and stream.count("s") == 1
    assert stream.sessions() == ["s"]
    assert LangGraphStoreStream(store).sessions() == []


def test_concurrent_appends_in_one_process_never_reuse_an_index():
    stream = LangGraphStoreStream(InMemoryStore())

    def work(t: int) -> None:
        for i in range(20):
            stream.append("s", f"t{t} {i}", "r")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [i.index for i in stream.items("s")] == list(range(80))


def test_embeddings_round_trip_exactly():
    stream = LangGraphStoreStream(InMemoryStore())
    rng = np.random.default_rng(0)
    vector = rng.standard_normal(384).astype(np.float32)
    vector[:3] = [np.float32(1e-38), np.float32(3.4e38), np.float32(-0.0)]
    stream.append("s", "a", "b", embedding=vector)
    stream.append("s", "c", "d", embedding=rng.standard_normal(384))  # float64 input is stored as float32
    items = stream.items("s")
    assert items[0].embedding.dtype == np.float32 and np.array_equal(items[0].embedding, vector)
    assert items[0].embedding.tobytes() == vector.tobytes()
    assert not items[0].embedding.flags.writeable and not stream.last("s").embedding.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        items[0].embedding[0] = 1.0
    vector[5] = 99.0  # the stored copy does not follow the caller's array
    assert stream.items("s")[0].embedding[5] != 99.0


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(TypeError, match="BaseStore"):
        LangGraphStoreStream({})  # type: ignore[arg-type]
    store = InMemoryStore()
    assert LangGraphStoreStream(store, namespace="fragrel").namespace == ("fragrel",)  # a str is one label
    with pytest.raises(TypeError, match="namespace"):
        LangGraphStoreStream(store, namespace=["fragrel"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="labels"):
        LangGraphStoreStream(store, namespace=("a.b",))
    with pytest.raises(ValueError, match="langgraph"):
        LangGraphStoreStream(store, namespace=("langgraph", "scm"))
    with pytest.raises(ValueError, match="page_size"):
        LangGraphStoreStream(store, page_size=0)
    stream = LangGraphStoreStream(store)
    for call in (lambda: stream.append("", "a", "b"), lambda: stream.items(None), lambda: stream.count(3)):
        with pytest.raises(TypeError, match="session_id"):
            call()  # type: ignore[operator]
    with pytest.raises(TypeError, match="observation"):
        stream.append("s", 1, "b")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="summary"):
        stream.append("s", "a", "b", summary=None)  # type: ignore[arg-type]
    for bad in (np.array([np.nan]), np.array([]), [1.0, np.inf]):
        with pytest.raises(ValueError, match="finite"):
            stream.append("s", "a", "b", embedding=bad)
    assert stream.count("s") == 0  # nothing was written by the failed calls
    store.put((*NS, "s"), "0000000000", {"observation": 1}, index=False)
    with pytest.raises(ValueError, match="not an SCM interaction"):
        stream.items("s")


def test_put_does_not_ask_the_store_to_embed():
    calls: list[int] = []

    class CountingEmbeddings:
        def embed_documents(self, texts):
            calls.append(len(texts))
            return [[1.0, 0.0] for _ in texts]

        def embed_query(self, text):
            return [1.0, 0.0]

    store = InMemoryStore(index={"dims": 2, "embed": CountingEmbeddings(), "fields": ["summary"]})
    stream = LangGraphStoreStream(store)
    stream.append("s", "a", "b", summary="a summary", embedding=np.ones(2))
    assert calls == [] and stream.count("s") == 1


# ------------------------------------------------------------------------------------------ memory


def test_self_controlled_memory_end_to_end_on_a_store():
    store = InMemoryStore()
    memory = SelfControlledMemory(
        controller(), stream=LangGraphStoreStream(store), embedder=HashingEmbedder(dim=64), k=2
    )
    memory.record("My cat is called Miso.", "Nice name!", session_id="ana")
    memory.record("I live in Lisbon.", "Lovely city.", session_id="ana")
    memory.record("I like green tea.", "Noted.", session_id="ana")
    memory.record("Hello", "Hi", session_id="bo")
    context = memory.prepare("What is my cat called?", session_id="ana")
    assert context.activation.value and context.flash.index == 2
    assert 0 in [m.item.index for m in context.memories]
    assert "Miso" in context.block
    turn = memory.chat("And where do I live?", session_id="ana")
    assert turn.item.index == 3 and memory.stream.last("ana").response == turn.response
    assert [i.index for i in memory.history("ana")] == [0, 1, 2, 3]
    assert len(store.search((*NS, "ana"), limit=100)) == 4
    # a second memory over the same store continues the stream
    again = SelfControlledMemory(controller(), stream=LangGraphStoreStream(store), embedder=HashingEmbedder(dim=64))
    assert again.prepare("cat?", session_id="ana").flash.index == 3
    assert again.clear("bo") == 1 and again.history("bo") == []


def test_memory_rejects_a_non_stream():
    with pytest.raises(TypeError, match="MemoryStream"):
        SelfControlledMemory(controller(), stream=InMemoryStore())  # type: ignore[arg-type]


async def test_async_memory_on_a_store():
    store = InMemoryStore()
    memory = SelfControlledMemory(controller(), stream=LangGraphStoreStream(store), embedder=HashingEmbedder(dim=64))
    await memory.arecord("My cat is called Miso.", "Nice name!", session_id="ana")
    await memory.arecord("I live in Lisbon.", "Lovely city.", session_id="ana")
    context = await memory.aprepare("What is my cat called?", session_id="ana")
    assert context.flash.index == 1 and [m.item.index for m in context.memories] == [0]


# ------------------------------------------------------------------------------------------ middleware


def test_middleware_recalls_an_earlier_run_from_the_agents_store():
    store = InMemoryStore()
    middleware = SCMMiddleware(model=controller(), store=store, embedder=HashingEmbedder(dim=64), session_id="ana")
    assert isinstance(middleware.memory.stream, LangGraphStoreStream)
    assert middleware.memory.stream.store is store
    model = RecordingChatModel(messages=iter([AIMessage("Nice name!"), AIMessage("Lovely city."), AIMessage("Miso.")]))
    agent = create_agent(model, middleware=[middleware], store=store)
    for text in ("My cat is called Miso.", "I live in Lisbon."):
        agent.invoke({"messages": [HumanMessage(text)]})
    result = agent.invoke({"messages": [HumanMessage("What is my cat called?")]})
    assert result["messages"][-1].content == "Miso."
    # the third run's model call saw the first run's turn, recalled from the store
    system = [m for m in model.seen[-1] if isinstance(m, SystemMessage)]
    assert system and "My cat is called Miso." in system[0].text and "Nice name!" in system[0].text
    stored = store.search((*NS, "ana"), limit=100)
    by_key = {item.key[:10]: item.value for item in stored}
    assert sorted(by_key) == ["0000000000", "0000000001", "0000000002"]
    assert [by_key[k]["observation"] for k in sorted(by_key)] == [
        "My cat is called Miso.",
        "I live in Lisbon.",
        "What is my cat called?",
    ]
    assert by_key["0000000002"]["response"] == "Miso." and len(by_key["0000000000"]["embedding"]) == 64


def test_middleware_store_and_stream_options():
    store = InMemoryStore()
    with pytest.raises(ValueError, match="at most one"):
        SCMMiddleware(model=controller(), store=store, path=":memory:")
    with pytest.raises(ValueError, match="at most one"):
        SCMMiddleware(model=controller(), store=store, stream=LangGraphStoreStream(store))
    core = SelfControlledMemory(controller(), embedder=HashingEmbedder(dim=8))
    with pytest.raises(ValueError, match="not both"):
        SCMMiddleware(core, store=store)
    with pytest.raises(TypeError, match="BaseStore"):
        SCMMiddleware(model=controller(), store="runtime")  # type: ignore[arg-type]
    custom = LangGraphStoreStream(store, namespace=("app", "scm"))
    middleware = SCMMiddleware(model=controller(), stream=custom, embedder=HashingEmbedder(dim=8))
    assert middleware.memory.stream is custom
    assert isinstance(SCMMiddleware(model=controller()).memory.stream, SCMStream)
