"""LlamaIndex function calling: ``FragRelLLM`` is a ``FunctionCallingLLM`` over a model with ``invoke_with_tools``
(``predict_and_call``, ``FunctionAgent``), scripted and with the real embedded SmolLM2-135M; ``use_embedded_models``
sets LlamaIndex's global ``Settings`` to the embedded models."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_index.core")

from _llm_fixtures import ScriptedToolModel, get_llama_cpp
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.tools import FunctionTool

from fragrel_integrations.llama_index import FragRelLLM
from fragrel_integrations.models.chat import ToolCall, ToolReply
from fragrel_integrations.testing import ScriptedChatModel


def _weather_tool(called: list[str]) -> FunctionTool:
    def weather(city: str) -> str:
        """Get the current weather in a city."""
        called.append(city)
        return f"It is sunny and 21 degrees in {city}."

    return FunctionTool.from_defaults(weather)


def _call(name: str, args: dict | None, raw: str = "", error: str | None = None) -> ToolReply:
    return ToolReply("", (ToolCall(name, args, raw or str(args), error),))


def test_predict_and_call_runs_the_chosen_tool():
    called: list[str] = []
    model = ScriptedToolModel([_call("weather", {"city": "Paris"})], [])
    llm = FragRelLLM(model=model)
    assert isinstance(llm, FunctionCallingLLM) and llm.metadata.is_function_calling_model
    out = llm.predict_and_call([_weather_tool(called)], "Weather in Paris?")
    assert called == ["Paris"] and out.response == "It is sunny and 21 degrees in Paris."
    request = model.tool_requests[0]
    assert request["tools"][0]["function"]["name"] == "weather" and request["tool_choice"] == "auto"
    assert request["allowed"] == ["weather"] and request["messages"][-1] == {
        "role": "user",
        "content": "Weather in Paris?",
    }


async def test_function_agent_calls_the_tool_then_answers_with_its_result():
    called: list[str] = []
    model = ScriptedToolModel([_call("weather", {"city": "Oslo"})], ["Sunny, 21 degrees."])
    agent = FunctionAgent(tools=[_weather_tool(called)], llm=FragRelLLM(model=model))
    out = await agent.run("Weather in Oslo?")
    assert called == ["Oslo"] and str(out) == "Sunny, 21 degrees."
    # the answer turn: every tool has answered, so a plain call with the result as a user turn named by the tool
    sent = model.calls[-1]["messages"]
    assert sent[-2:] == [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "user", "content": "Tool result (weather): It is sunny and 21 degrees in Oslo."},
    ]


def test_earlier_calls_are_shown_in_the_models_call_format_when_tools_repeat():
    model = ScriptedToolModel([ToolReply("done")], ["plain"])
    llm = FragRelLLM(model=model, repeat_tool_calls=True)
    history = [
        ChatMessage(role="user", content="Weather in Rome?"),
        ChatMessage(
            role="assistant",
            blocks=[ToolCallBlock(tool_call_id="c1", tool_name="weather", tool_kwargs={"city": "Rome"})],
        ),
        ChatMessage(role="tool", content="rain", additional_kwargs={"tool_call_id": "c1"}),
    ]
    assert llm.chat_with_tools([_weather_tool([])], chat_history=history, tool_required=True).message.content == "done"
    request = model.tool_requests[0]
    assert request["allowed"] is None and request["tool_choice"] == "required"
    assert request["messages"][1:] == [
        {"role": "assistant", "content": 'functions.weather:\n{"city": "Rome"}'},
        {"role": "user", "content": "Tool result (weather): rain"},
    ]
    assert llm.chat(history).message.content == "plain"  # no tools: a plain chat, calls written as text
    assert model.calls[-1]["messages"][1] == {"role": "assistant", "content": '[tool call weather({"city": "Rome"})]'}


def test_invalid_arguments_and_missing_calls():
    llm = FragRelLLM(model=ScriptedToolModel([_call("weather", None, '{"city": "Par', "not valid JSON")], []))
    response = llm.chat_with_tools([_weather_tool([])], "Weather in Paris?")
    assert response.additional_kwargs["tool_call_errors"] == {"weather": "not valid JSON"}
    selection = llm.get_tool_calls_from_response(response)
    assert selection[0].tool_name == "weather" and selection[0].tool_kwargs == {}
    text = FragRelLLM(model=ScriptedToolModel([ToolReply("Hello!")], []))
    response = text.chat_with_tools([_weather_tool([])], "Hi")
    assert response.message.content == "Hello!" and text.get_tool_calls_from_response(response, False) == []
    with pytest.raises(ValueError, match=r"expected at least one tool call.*Hello"):
        text.get_tool_calls_from_response(response)
    with pytest.raises(TypeError, match="FunctionTool"):
        text.chat_with_tools([object()], "Hi")


async def test_streaming_with_tools_gives_one_response_with_the_decision():
    llm = FragRelLLM(model=ScriptedToolModel([_call("weather", {"city": "Oslo"})] * 2, []))
    chunks = list(llm.stream_chat_with_tools([_weather_tool([])], "Weather in Oslo?"))
    assert len(chunks) == 1 and llm.get_tool_calls_from_response(chunks[0])[0].tool_kwargs == {"city": "Oslo"}
    achunks = [c async for c in await llm.astream_chat_with_tools([_weather_tool([])], "Weather in Oslo?")]
    assert len(achunks) == 1 and llm.get_tool_calls_from_response(achunks[0])[0].tool_name == "weather"


def test_structured_predict_goes_through_a_forced_tool_call():
    from llama_index.core.prompts import PromptTemplate
    from pydantic import BaseModel

    class City(BaseModel):
        name: str
        country: str

    model = ScriptedToolModel([_call("City", {"name": "Paris", "country": "France"})], [])
    out = FragRelLLM(model=model).structured_predict(City, PromptTemplate("City in: {text}"), text="Paris, France")
    assert out == City(name="Paris", country="France")
    assert model.tool_requests[0]["tool_choice"] == "required"  # the JSON is written under the schema's grammar


def test_a_model_without_tool_calling_says_what_to_use():
    llm = FragRelLLM(model=ScriptedChatModel(["hi"]))
    assert llm.metadata.is_function_calling_model is False
    with pytest.raises(NotImplementedError, match=r"LlamaCppChatModel.*OpenAILike"):
        llm.chat_with_tools([_weather_tool([])], "Weather?")


# ------------------------------------------------------------------------------------ the real SmolLM2-135M
@pytest.mark.slow
def test_embedded_model_predict_and_call():
    called: list[str] = []
    llm = FragRelLLM(model=get_llama_cpp(), max_tokens=48, temperature=0)
    out = llm.predict_and_call([_weather_tool(called)], "What's the weather in Paris?")
    assert called == ["Paris"] and "21 degrees" in out.response


@pytest.mark.slow
async def test_embedded_model_in_a_function_agent():
    called: list[str] = []
    llm = FragRelLLM(model=get_llama_cpp(), max_tokens=48, temperature=0)
    out = await FunctionAgent(tools=[_weather_tool(called)], llm=llm).run("What's the weather in Oslo?")
    assert called == ["Oslo"] and str(out).strip()


# ------------------------------------------------------------------------------------ Settings
def _run(code: str) -> str:
    import subprocess
    import sys
    import textwrap

    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_use_embedded_models_rejects_non_bools():
    from fragrel_integrations.llama_index import use_embedded_models

    with pytest.raises(TypeError, match=r"Settings\.embed_model"):
        use_embedded_models(embed_model="minilm")


@pytest.mark.slow
def test_use_embedded_models_makes_the_default_quickstart_run_offline():
    """In a fresh process (Settings are global): no OpenAI package, no key, no network; index + query engine with
    no embed_model=/llm= arguments run on MiniLM and SmolLM2."""
    out = _run(
        """
        import os, sys
        os.environ.pop("OPENAI_API_KEY", None)
        class Hide:  # LlamaIndex's OpenAI defaults must not be reached
            def find_spec(self, name, path=None, target=None):
                if name.startswith(("llama_index.embeddings.openai", "llama_index.llms.openai", "openai")):
                    raise ImportError(f"No module named {name!r}")
        sys.meta_path.insert(0, Hide())
        from llama_index.core import Document, Settings, VectorStoreIndex
        from fragrel_integrations.llama_index import FragRelLLM, MiniLMEmbedding, use_embedded_models
        embed, llm = use_embedded_models()
        print(Settings.embed_model is embed, isinstance(embed, MiniLMEmbedding), Settings.llm is llm)
        docs = [Document(text="Mary went to the kitchen."), Document(text="John picked up the football.")]
        engine = VectorStoreIndex.from_documents(docs).as_query_engine(similarity_top_k=1)
        response = engine.query("Who picked up the football?")
        print(response.source_nodes[0].node.get_content(), bool(str(response).strip()))
        """
    )
    assert out.splitlines() == ["True True True", "John picked up the football. True"]
