"""Several SCM memories in one LangChain agent: ``SCMMiddleware(name=...)``, each middleware recalling and recording on
its own (its own private state entry), and a default name that stays the same when the middleware is re-created."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("langchain")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver
from test_scm_frameworks import controller, recording

from fragrel_integrations.core.scm import SelfControlledMemory
from fragrel_integrations.langchain import SCMMiddleware
from fragrel_integrations.testing import HashingEmbedder


def _two(tmp_path):
    work = SCMMiddleware(
        model=controller(), path=tmp_path / "work.sqlite", embedder=HashingEmbedder(dim=64), name="work_memory"
    )
    home = SCMMiddleware(
        model=controller(), path=tmp_path / "home.sqlite", embedder=HashingEmbedder(dim=64), name="home_memory"
    )
    work.memory.record("The deploy key is in the vault.", "Noted.", session_id="t")
    home.memory.record("My cat is called Miso.", "Cute.", session_id="t")
    return work, home


def test_default_name_is_the_class_name_however_often_it_is_created():
    core = SelfControlledMemory(controller(), embedder=HashingEmbedder(dim=8))
    assert SCMMiddleware(core).name == SCMMiddleware(core).name == "SCMMiddleware"
    assert SCMMiddleware(core, name="work").name == "work"
    with pytest.raises(AssertionError, match="duplicate middleware"):  # create_agent's own check, unchanged
        create_agent(recording("x"), middleware=[SCMMiddleware(core), SCMMiddleware(core)])


@pytest.mark.parametrize("bad", ["", "  ", "a:b", "a|b", 3])
def test_bad_names_are_rejected_with_the_rule(bad):
    core = SelfControlledMemory(controller(), embedder=HashingEmbedder(dim=8))
    with pytest.raises(TypeError, match="name must be a non-empty str"):
        SCMMiddleware(core, name=bad)


def test_two_named_middlewares_in_one_agent_recall_and_record_independently(tmp_path):
    work, home = _two(tmp_path)
    model = recording("Both noted.", "Still noted.")
    agent = create_agent(model, middleware=[work, home], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    out = agent.invoke({"messages": [{"role": "user", "content": "Where is the deploy key and my cat?"}]}, config)
    assert out["messages"][-1].content == "Both noted."
    assert not any(k.startswith("scm_") for k in out)  # the private state stays private
    seen = model.seen[0]
    assert [type(m) for m in seen] == [SystemMessage, HumanMessage]
    system = seen[0].content
    # each middleware added its own memory block, from its own stream
    assert system.count("Previous turn:") == 2
    assert "The deploy key is in the vault." in system and "My cat is called Miso." in system
    # each recorded the turn into its own stream, once
    for middleware, first in ((work, "The deploy key is in the vault."), (home, "My cat is called Miso.")):
        assert [i.observation for i in middleware.memory.history("t")] == [first, "Where is the deploy key and my cat?"]
    # a second run: still one block each, from each middleware's own (now longer) stream
    agent.invoke({"messages": [{"role": "user", "content": "And now?"}]}, config)
    second = model.seen[1][0].content
    assert second.count("Previous turn:\nUser: Where is the deploy key and my cat?") == 2
    assert [i.response for i in work.memory.history("t")] == ["Noted.", "Both noted.", "Still noted."]
    assert [i.response for i in home.memory.history("t")] == ["Cute.", "Both noted.", "Still noted."]


def test_two_named_middlewares_with_different_sessions_on_one_stream_stay_apart():
    core = SelfControlledMemory(controller(), embedder=HashingEmbedder(dim=64))
    core.record("I am at work.", "OK.", session_id="work")
    core.record("I am at home.", "OK.", session_id="home")
    work = SCMMiddleware(core, session_id="work", name="work_memory")
    home = SCMMiddleware(core, session_id="home", name="home_memory")
    model = recording(AIMessage("Fine."))
    agent = create_agent(model, middleware=[work, home])

    asyncio.run(agent.ainvoke({"messages": [{"role": "user", "content": "Where am I?"}]}))
    system = model.seen[0][0].content
    assert "I am at work." in system and "I am at home." in system
    assert [i.observation for i in core.history("work")] == ["I am at work.", "Where am I?"]
    assert [i.observation for i in core.history("home")] == ["I am at home.", "Where am I?"]
