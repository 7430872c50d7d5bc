"""The LangChain and LlamaIndex adapters of chat models and SCM memory delegate to one framework-free core
(``models.chat``, ``adapters.chat_turns``, ``adapters.keyed_stream``): the same conversation reaches the wrapped
model as the same messages, and the same bad argument fails with the same words, whichever framework it comes
through; the key-value stream runs on a plain dict."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from llama_index.core.base.llms.types import ChatMessage, TextBlock, ToolCallBlock

from fragrel_integrations.adapters.chat_turns import OpenTurn, collect_turns
from fragrel_integrations.adapters.keyed_stream import KeyedStoreStream
from fragrel_integrations.langchain.chat_model import FragRelChatModel
from fragrel_integrations.langchain.chat_model import to_role_messages as lc_roles
from fragrel_integrations.langchain.scm_middleware import SCMMiddleware
from fragrel_integrations.llama_index.llm import FragRelLLM
from fragrel_integrations.llama_index.llm import to_role_messages as li_roles
from fragrel_integrations.llama_index.scm_memory import SCMMemory
from fragrel_integrations.testing import ScriptedChatModel

LC = [
    SystemMessage("Be brief."),
    HumanMessage("Weather in Oslo?"),
    AIMessage("Let me look.", tool_calls=[{"name": "weather", "args": {"city": "Oslo"}, "id": "c1"}]),
    ToolMessage("sunny", tool_call_id="c1", name="weather"),
    AIMessage("It is sunny."),
    AIMessage("", tool_calls=[{"name": "weather", "args": {"city": "Rome"}, "id": "c2"}]),
]
LI = [
    ChatMessage(role="system", content="Be brief."),
    ChatMessage(role="user", content="Weather in Oslo?"),
    ChatMessage(
        role="assistant",
        blocks=[
            TextBlock(text="Let me look."),
            ToolCallBlock(tool_call_id="c1", tool_name="weather", tool_kwargs={"city": "Oslo"}),
        ],
    ),
    ChatMessage(role="tool", content="sunny", additional_kwargs={"tool_call_id": "c1", "name": "weather"}),
    ChatMessage(role="assistant", content="It is sunny."),
    ChatMessage(
        role="assistant", blocks=[ToolCallBlock(tool_call_id="c2", tool_name="weather", tool_kwargs={"city": "Rome"})]
    ),
]


def test_one_conversation_reaches_the_model_alike_through_both_frameworks():
    sent = lc_roles(LC)
    assert sent == li_roles(LI)
    assert sent[3] == {"role": "user", "content": "Tool result (weather): sunny"}
    assert sent[2]["content"].startswith("Let me look.\n") and "Oslo" in sent[2]["content"]


def test_both_wrappers_send_the_same_messages_and_parameters():
    lc_model, li_model = ScriptedChatModel(["ok"]), ScriptedChatModel(["ok"])
    FragRelChatModel(model=lc_model, max_tokens=8, stop=["."]).invoke(LC[:5], temperature=0.5)
    FragRelLLM(model=li_model, max_tokens=8, stop=["."]).chat(LI[:5], temperature=0.5)
    assert lc_model.calls == li_model.calls


@pytest.mark.parametrize("bad", [{"temperature": 5}, {"max_tokens": 0}, {"stop": [""]}])
def test_a_bad_generation_parameter_fails_with_the_same_words(bad):
    messages = []
    for wrapper in (FragRelChatModel, FragRelLLM):
        with pytest.raises(ValueError) as info:
            wrapper(model=ScriptedChatModel(["x"]), **bad)
        messages.append(str(info.value).split("[type=")[0].split("\n")[1].strip())
    assert messages[0] == messages[1]


def test_the_scm_adapters_fail_alike():
    with pytest.raises(TypeError) as lc:
        SCMMiddleware(model=ScriptedChatModel(["x"]), session_id="")
    with pytest.raises(TypeError) as li:
        SCMMemory(llm=ScriptedChatModel(["x"]), session_id="")
    assert str(lc.value) == str(li.value) == "session_id must be a non-empty str or None, got ''"
    with pytest.raises(ValueError, match=r"^model is required: pass the controller model as model=\.\.\., or "):
        SCMMiddleware()
    with pytest.raises(ValueError, match=r"^llm is required: pass the controller model as llm=\.\.\., or "):
        SCMMemory(session_id="ana")


def test_open_turn_and_collect_turns_agree_on_complete_turns():
    messages = [("user", "a", False), ("user", "b", False), ("assistant", "", False), ("assistant", " A ", True)]
    turn: OpenTurn[None] = OpenTurn()
    done = [d for role, text, final in messages if (d := turn.add(role, text, final, None)) is not None]
    assert done == collect_turns([], messages)[0] == [("a\nb", "A")]
    assert turn.add("assistant", "stray", True, None) is None and turn.observation() is None
    turn.add("user", "x", False, None)
    turn.add("assistant", "", False, None)
    turn.add("user", "y", False, None)  # after another message: a new turn, the unanswered one dropped
    assert turn.observation() == "y"
    assert collect_turns(["x"], [("user", "y", False)]) == ([], ["x", "y"])


class _DictItem:
    def __init__(self, namespace: tuple[str, ...], key: str, value: dict) -> None:
        self.namespace, self.key, self.value = namespace, key, value


class _DictStream(KeyedStoreStream):
    """The SCM key-value stream over a plain dict, no framework: the core class plus the two batch operations."""

    def __init__(self, data: dict) -> None:
        self.data = data  # (namespace, key) -> value
        super().__init__(self)

    def put(self, ns, key, value, index=None):
        self.data[(ns, key)] = value

    def search(self, ns, limit=10, offset=0, filter=None):
        (field, cond), *_ = (filter or {"seq": {"$gte": ""}}).items()  # None: every item
        found = [
            _DictItem(n, k, v)
            for (n, k), v in sorted(self.data.items())
            if n == ns and v.get(field, "") >= cond["$gte"]
        ]
        return found[offset : offset + limit]

    def list_namespaces(self, prefix, max_depth, limit, offset):
        return sorted({n[:max_depth] for n, _ in self.data if n[: len(prefix)] == prefix})[offset : offset + limit]

    def _batch_ends(self, ns, keys, refresh, searches):
        ends = [_DictItem(ns, key, self.data[(ns, key)]) if (ns, key) in self.data else None for key in keys]
        return [*ends, *(self.search(ns, limit=self.page_size, offset=o, filter=f) for f, o in searches)]

    def _batch_delete(self, ns, keys):
        for key in keys:
            del self.data[(ns, key)]


def test_the_key_value_stream_runs_without_a_framework_and_sees_other_writers():
    data: dict = {}
    mine, other = _DictStream(data), _DictStream(data)
    assert [mine.append("a.b", f"o{i}", "r").index for i in range(3)] == [0, 1, 2]
    assert [i.observation for i in mine.items("a.b")] == ["o0", "o1", "o2"]  # now cached
    other.append("a.b", "late", "r")  # another stream object on the same store: found by the cached read
    assert [(i.index, i.observation) for i in mine.items("a.b")][-1] == (3, "late")
    assert mine.sessions() == ["a.b"] and mine.count("a.b") == 4
    assert other.clear("a.b") == 4 and mine.items("a.b") == [] and data == {}
