"""LangMem on our LangGraph store: ``TripletMemoryStore`` keeps the ``{"content": ...}`` memories LangMem's tools and
memory managers write (under ``("memories", user_id)``) beside the triplets, so one store serves both. Tested with
the value shapes LangMem writes through the ``BaseStore`` API, and with langmem's own tools when it is installed."""

from __future__ import annotations

import asyncio
import uuid

import pytest

pytest.importorskip("langgraph")

from langgraph.store.base import Item, SearchItem

from fragrel_integrations.langchain import TripletMemoryStore
from fragrel_integrations.testing import HashingEmbedder

NS = ("memories", "user-1")


@pytest.fixture
def store(tmp_path):
    s = TripletMemoryStore(tmp_path / "memory.db", embedder=HashingEmbedder(dim=128))
    yield s
    s.close()


def test_manage_memory_create_update_delete_shapes(store):
    key = str(uuid.uuid4())
    store.put(NS, key, {"content": "The user prefers dark mode in every editor."})  # action="create"
    item = store.get(NS, key)
    assert isinstance(item, Item) and item.value == {"content": "The user prefers dark mode in every editor."}
    assert item.namespace == NS and item.key == key
    created = item.created_at
    store.put(NS, key, {"content": "The user prefers light mode now."})  # action="update": same key
    again = store.get(NS, key)
    assert again.value == {"content": "The user prefers light mode now."}
    assert again.created_at == created and again.updated_at >= created
    store.delete(NS, key)  # action="delete"
    assert store.get(NS, key) is None


def test_search_memory_finds_content_by_meaning_and_mixes_with_triplets(store):
    store.put(NS, "a", {"content": "The user prefers dark mode in every editor."})
    store.put(NS, "b", {"content": "The user's dog is called Rex."})
    store.put(NS, "t", {"subject": "user", "relation": "works at", "object": "Acme"})
    store.put(("memories", "user-2"), "c", {"content": "Another user likes dark mode too."})
    hits = store.search(NS, query="dark mode editor", limit=10)  # what create_search_memory_tool calls
    assert all(isinstance(h, SearchItem) for h in hits)
    assert hits[0].key == "a" and hits[0].score is not None
    assert "c" not in {h.key for h in hits}  # another user's namespace is not searched
    assert [h.score for h in hits] == sorted([h.score for h in hits], reverse=True)
    # no query: every item of the namespace, documents and triplets, newest first
    assert [h.key for h in store.search(NS)] == ["t", "b", "a"]
    assert [h.key for h in store.search(NS, filter={"content": "The user's dog is called Rex."})] == ["b"]
    # a RET-LLM read pattern reads the triplets only
    assert [h.key for h in store.search(NS, query="user>>works at>>")] == ["t"]
    assert store.list_namespaces(prefix=("memories",)) == [NS, ("memories", "user-2")]


def test_memory_manager_shape_and_unindexed_puts(store):
    # create_memory_store_manager writes {"kind": <schema name>, "content": <the schema's fields>}
    store.put(NS, "m", {"kind": "Memory", "content": {"content": "Rex is a beagle."}})
    assert store.get(NS, "m").value == {"kind": "Memory", "content": {"content": "Rex is a beagle."}}
    assert store.search(NS, query="Rex beagle")[0].key == "m"
    store.put(NS, "hidden", {"content": "A note kept out of search."}, index=False)
    assert "hidden" not in {h.key for h in store.search(NS, query="A note kept out of search.")}
    assert "hidden" in {h.key for h in store.search(NS)}


def test_a_key_holds_one_item_whichever_kind(store):
    store.put(NS, "k", {"content": "free text"})
    store.put(NS, "k", {"subject": "Ann", "relation": "likes", "object": "tea"})
    assert store.get(NS, "k").value == {"subject": "Ann", "relation": "likes", "object": "tea"}
    assert [h.key for h in store.search(NS)] == ["k"]
    store.put(NS, "k", {"content": "free text again"})
    assert store.get(NS, "k").value == {"content": "free text again"}
    assert [h.key for h in store.search(NS)] == ["k"]


def test_documents_survive_reopening_and_bad_values_are_rejected(tmp_path):
    path = tmp_path / "m.db"
    first = TripletMemoryStore(path, embedder=HashingEmbedder(dim=64))
    first.put(NS, "a", {"content": "Persisted memory."})
    first.close()
    second = TripletMemoryStore(path, embedder=HashingEmbedder(dim=64))
    assert second.get(NS, "a").value == {"content": "Persisted memory."}
    assert second.search(NS, query="Persisted memory")[0].key == "a"
    with pytest.raises(TypeError, match="JSON-serialisable"):
        second.put(NS, "x", {"content": object()})
    with pytest.raises(TypeError, match="must be a dict"):
        second.batch([__import__("langgraph.store.base", fromlist=["PutOp"]).PutOp(NS, "y", "text")])
    second.close()


def test_async_api_as_langmem_calls_it(store):
    async def run():
        await store.aput(NS, "a", {"content": "Async memory about tea."})
        hits = await store.asearch(NS, query="tea", limit=5, offset=0, filter=None)
        await store.adelete(NS, "a")
        return hits, await store.aget(NS, "a")

    hits, gone = asyncio.run(run())
    assert [h.key for h in hits] == ["a"] and gone is None


def test_graph_view_ignores_documents(tmp_path):
    from fragrel_integrations.llama_index import TripletGraphStore

    lg = TripletMemoryStore(tmp_path / "g.db", embedder=HashingEmbedder(dim=64))
    lg.put(("g",), "doc", {"content": "not a node"})
    lg.put(("g",), "t", {"subject": "Ann", "relation": "likes", "object": "tea"})
    graph = TripletGraphStore(lg.core, namespace=("g",))
    assert sorted(n.id for n in graph.get()) == ["Ann", "tea"]
    lg.close()


# ------------------------------------------------------------------------------------------ langmem itself


def test_langmem_tools_on_the_triplet_store_inside_an_agent(store):
    langmem = pytest.importorskip("langmem")
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    class ToolModel(GenericFakeChatModel):
        def bind_tools(self, tools, **kwargs):
            return self

    manage = langmem.create_manage_memory_tool(namespace=("memories", "{langgraph_user_id}"))
    search = langmem.create_search_memory_tool(namespace=("memories", "{langgraph_user_id}"))
    calls = [
        AIMessage(
            "",
            tool_calls=[
                {"name": manage.name, "args": {"content": "User prefers dark mode."}, "id": "1", "type": "tool_call"}
            ],
        ),
        AIMessage("Saved."),
        AIMessage(
            "", tool_calls=[{"name": search.name, "args": {"query": "dark mode"}, "id": "2", "type": "tool_call"}]
        ),
        AIMessage("You prefer dark mode."),
    ]
    agent = create_agent(ToolModel(messages=iter(calls)), tools=[manage, search], store=store)
    config = {"configurable": {"langgraph_user_id": "user-1"}}
    agent.invoke({"messages": [{"role": "user", "content": "Remember I like dark mode."}]}, config)
    stored = store.search(NS)
    assert [i.value["content"] for i in stored] == ["User prefers dark mode."]
    out = agent.invoke({"messages": [{"role": "user", "content": "What do I like?"}]}, config)
    tool_result = [m for m in out["messages"] if m.type == "tool"][-1]
    assert "User prefers dark mode." in str(tool_result.content)
    # the triplet tools keep working on the same store
    write, read = store.as_tools(namespace=NS)
    write.invoke({"subject": "user", "relation": "likes", "object": "dark mode"})
    assert "dark mode" in read.invoke({"subject": "user", "relation": "likes", "object": ""})


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_documents_on_both_backends(kind, tmp_path):
    from _triplet_fixtures import make_backend

    from fragrel_integrations.core.triplets import TripletStore

    store = TripletMemoryStore(TripletStore(make_backend(kind, tmp_path), embedder=HashingEmbedder(dim=64)))
    store.put(NS, "a", {"content": "The user prefers dark mode."})
    store.put(("memories", "user-2"), "b", {"content": "Someone else."})
    store.put(NS, "t", {"subject": "user", "relation": "likes", "object": "tea"})
    assert store.get(NS, "a").value == {"content": "The user prefers dark mode."}
    assert store.search(NS, query="dark mode")[0].key == "a"
    assert sorted(h.key for h in store.search(("memories",))) == ["a", "b", "t"]
    assert store.list_namespaces() == [NS, ("memories", "user-2")]
    store.delete(NS, "a")
    assert store.get(NS, "a") is None and [h.key for h in store.search(NS)] == ["t"]
    store.close()


def test_two_processes_share_one_store_file(tmp_path):
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    import fragrel_integrations

    root = Path(fragrel_integrations.__file__).resolve().parent.parent
    path = tmp_path / "shared.db"
    child = textwrap.dedent(
        """
        import sys
        from fragrel_integrations.langchain import TripletMemoryStore
        from fragrel_integrations.testing import HashingEmbedder
        store = TripletMemoryStore(sys.argv[1], embedder=HashingEmbedder(dim=64))
        store.put(("memories", "user-1"), "from-child", {"content": "Written by the other process."})
        store.put(("memories", "user-1"), "fact", {"subject": "user", "relation": "likes", "object": "tea"})
        print(sorted(i.key for i in store.search(("memories", "user-1"))))
        store.close()
        """
    )
    parent = TripletMemoryStore(path, embedder=HashingEmbedder(dim=64))
    parent.put(NS, "from-parent", {"content": "Written by this process."})
    run = subprocess.run(
        [sys.executable, "-c", child, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "['fact', 'from-child', 'from-parent']"  # the child saw the parent's write
    assert parent.get(NS, "from-child").value == {"content": "Written by the other process."}
    assert parent.search(NS, query="other process")[0].key == "from-child"
    parent.close()
