"""Constrained replies (issue 14): the ReplyFormat type, how steps pass it only to models that enforce it, the
OpenAI fallback, and the steps that use it (tree summaries, SCM gates, RET-LLM writes). Fake models only; the
real-model checks are in test_structured_output_llm.py."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from _llm_fixtures import FakeOpenAIServer

from fragrel_integrations.core.scm.memory_controller import YES_NO_FORMAT, SCMController
from fragrel_integrations.core.tree.summariser import Summariser
from fragrel_integrations.core.tree.summary import parse_summary, summary_format
from fragrel_integrations.core.triplets import TripletStore
from fragrel_integrations.core.triplets.controller_prompts import READ_FORMAT, WRITE_FORMAT
from fragrel_integrations.core.triplets.triplet_controller import TripletMemoryController
from fragrel_integrations.models.chat import ChatModelBase
from fragrel_integrations.models.response_cache import CachedChatModel
from fragrel_integrations.models.structured import MAX_PARSE_CHARS, ReplyFormat, format_kwargs, supports_format
from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel


class FormatModel(ChatModelBase):
    """Enforces every format by answering from ``constrained`` (a function of the format); free text otherwise."""

    model_name = "format-model"

    def __init__(self, constrained, free="free text", kinds=("choice", "regex", "json", "grammar")):
        self.constrained = constrained
        self.free = free
        self.kinds = kinds
        self.formats: list[ReplyFormat | None] = []

    def supports_format(self, reply_format):
        return reply_format.kind in self.kinds

    def _generate(self, messages, temperature, max_tokens, stop):
        self.formats.append(None)
        return self.free

    def _generate_format(self, messages, temperature, max_tokens, stop, reply_format):
        self.formats.append(reply_format)
        return self.constrained(reply_format)


class DuckModel:
    """A user's own model: invoke/ainvoke without a reply_format argument (must keep working)."""

    def __init__(self, reply):
        self.reply = reply
        self.calls = 0

    def invoke(self, messages, *, temperature=None, max_tokens=None, stop=None):
        self.calls += 1
        return self.reply

    async def ainvoke(self, messages, *, temperature=None, max_tokens=None, stop=None):
        return self.invoke(messages)


# ----------------------------------------------------------------------------------------------- ReplyFormat


def test_constructors_validate_and_name_the_fix():
    with pytest.raises(ValueError, match="at least one label"):
        ReplyFormat.choice([])
    with pytest.raises(TypeError, match="list of strings"):
        ReplyFormat.choice("yes")
    with pytest.raises(ValueError, match="differ"):
        ReplyFormat.choice(["Yes", "yes"])
    with pytest.raises(ValueError, match="one-line"):
        ReplyFormat.choice(["yes ", "no"])
    with pytest.raises(ValueError, match="does not compile"):
        ReplyFormat.regex("(unclosed")
    with pytest.raises(ValueError, match="without \\^ and \\$"):
        ReplyFormat.regex("^yes$")
    with pytest.raises(ValueError, match="root ::="):
        ReplyFormat.grammar('answer ::= "x"')
    with pytest.raises(TypeError, match="JSON schema"):
        ReplyFormat.json('{"type": "object"}')  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="serialisable"):
        ReplyFormat.json({"type": object})
    with pytest.raises(ValueError, match="kind"):
        ReplyFormat("xml", "x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="name"):
        ReplyFormat.regex("x", name="has space")
    # frozen and hashable (grammar caches and cache keys rely on it)
    fmt = ReplyFormat.json({"b": 1, "a": 2})
    assert fmt == ReplyFormat.json({"a": 2, "b": 1}) and hash(fmt) == hash(ReplyFormat.json({"a": 2, "b": 1}))
    with pytest.raises(AttributeError):
        fmt.spec = "x"  # type: ignore[misc]


def test_parse_choice_regex_json_and_grammar():
    yn = ReplyFormat.choice(["yes", "no"])
    assert [yn.parse(x) for x in ("yes", " No.", '"YES"', "**no**", "yes, memory", "maybe", "")] == [
        "yes",
        "no",
        "yes",
        "no",
        None,
        None,
        None,
    ]
    rx = ReplyFormat.regex(r"[A-Z][a-z]+ \d+")
    assert rx.parse(" Tom 42\n") == "Tom 42" and rx.parse("Tom 42 and more") is None
    schema = {
        "type": "object",
        "properties": {
            "summary": {"type": "string", "maxLength": 20},
            "surprise": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["summary", "surprise"],
        "additionalProperties": False,
    }
    js = ReplyFormat.json(schema)
    assert js.parse('{"summary": "A.", "surprise": ["B"]}') == {"summary": "A.", "surprise": ["B"]}
    assert js.parse('{"summary": "A."}') is None  # a required key missing
    assert js.parse('{"summary": "A.", "surprise": [1]}') is None  # wrong item type
    assert js.parse('{"summary": "A.", "surprise": [], "x": 1}') is None  # additional property
    assert js.parse('{"summary": "' + "a" * 21 + '", "surprise": []}') is None  # maxLength
    assert js.parse("not json") is None
    triples = ReplyFormat.json(
        {
            "type": "array",
            "items": {"type": "array", "prefixItems": [{"type": "string"}] * 3, "minItems": 3, "maxItems": 3},
        }
    )
    assert triples.parse('[["Mary", "moved to", "bathroom"]]') == [["Mary", "moved to", "bathroom"]]
    assert triples.parse('[["Mary", "moved to"]]') is None
    assert ReplyFormat.grammar('root ::= "x"').parse(" x ") == "x"
    assert yn.parse("yes" + " " * MAX_PARSE_CHARS) is None  # too long to look at
    with pytest.raises(TypeError):
        yn.parse(None)


def test_parse_is_fast_on_hostile_replies():
    start = time.perf_counter()
    ReplyFormat.json({"type": "array"}).parse("[" * 50_000)
    ReplyFormat.choice(["yes", "no"]).parse("y" * 99_000)
    summary_format(300, 150).parse("(Summary): " + "a" * 99_000)
    WRITE_FORMAT.parse("[MEM_WRITE{" + "a>>" * 30_000)
    assert time.perf_counter() - start < 5


def test_response_schema_wraps_choices_and_regexes_and_unwraps_the_reply():
    yn = ReplyFormat.choice(["yes", "no"])
    schema = yn.response_schema()
    assert schema["properties"]["answer"]["enum"] == ["yes", "no"] and schema["required"] == ["answer"]
    assert yn.unwrap('{"answer": "no"}') == "no" and yn.unwrap("no") == "no"
    assert ReplyFormat.regex("a+").response_schema()["properties"]["answer"]["pattern"] == "^(?:a+)$"
    assert ReplyFormat.grammar('root ::= "x"').response_schema() is None
    js = ReplyFormat.json({"type": "object"})
    assert js.response_schema() == {"type": "object"} and js.unwrap('{"answer": "x"}') == '{"answer": "x"}'


# ----------------------------------------------------------------------------------------------- protocol


def test_format_kwargs_only_for_models_that_enforce_the_format():
    yn = ReplyFormat.choice(["yes", "no"])
    assert format_kwargs(ScriptedChatModel(["x"]), yn) == {}  # ChatModelBase enforces nothing
    assert format_kwargs(DuckModel("x"), yn) == {}  # no supports_format at all
    assert format_kwargs(FormatModel(lambda f: "yes"), yn) == {"reply_format": yn}
    assert format_kwargs(FormatModel(lambda f: "yes", kinds=("json",)), yn) == {}
    assert format_kwargs(FormatModel(lambda f: "yes"), None) == {}

    class Broken(DuckModel):
        def supports_format(self, fmt):
            raise RuntimeError("boom")

    assert not supports_format(Broken("x"), yn)  # a failing check means "not enforced", not a crash
    with pytest.raises(TypeError, match="ReplyFormat"):
        supports_format(DuckModel("x"), "yes|no")  # type: ignore[arg-type]


async def test_base_class_ignores_formats_it_cannot_enforce_and_rejects_non_formats():
    model = ScriptedChatModel(["free", "free again"])
    assert model.invoke("q", reply_format=ReplyFormat.choice(["yes", "no"])) == "free"
    assert await model.ainvoke("q", reply_format=ReplyFormat.choice(["yes", "no"])) == "free again"
    with pytest.raises(TypeError, match="ReplyFormat"):
        model.invoke("q", reply_format="yes|no")  # type: ignore[arg-type]
    enforcing = FormatModel(lambda f: "yes")
    assert await enforcing.ainvoke("q", reply_format=YES_NO_FORMAT) == "yes"
    assert enforcing.formats == [YES_NO_FORMAT]


def test_the_cache_wrapper_forwards_the_format_and_keeps_replies_apart():
    inner = FormatModel(lambda f: "yes")
    cached = CachedChatModel(inner, ":memory:")
    assert cached.supports_format(YES_NO_FORMAT)
    assert cached.invoke("q", reply_format=YES_NO_FORMAT) == "yes"
    assert cached.invoke("q") == "free text"  # same messages, no format: another request
    assert cached.invoke("q", reply_format=YES_NO_FORMAT) == "yes" and cached.hits == 1
    assert inner.formats == [YES_NO_FORMAT, None]


# ----------------------------------------------------------------------------------------------- OpenAI


def test_openai_sends_json_schema_and_falls_back_once_per_instance_on_400():
    pytest.importorskip("openai")
    from fragrel_integrations.models.openai_chat import OpenAIChatModel

    with FakeOpenAIServer(plan=[400]) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, max_retries=0)
        assert model.supports_format(YES_NO_FORMAT)
        assert not model.supports_format(ReplyFormat.grammar('root ::= "x"'))  # GBNF is not sent
        reply = model.invoke("Is it?", reply_format=YES_NO_FORMAT)
        assert reply == "echo: Is it?"  # the plain retry's text (the step then parses it leniently)
        first, second = server.requests
        assert first["response_format"]["type"] == "json_schema"
        assert first["response_format"]["json_schema"]["schema"] == YES_NO_FORMAT.response_schema()
        assert "response_format" not in second
        assert model.format_refused and not model.supports_format(YES_NO_FORMAT)
        model.invoke("Again?", reply_format=YES_NO_FORMAT)  # remembered: one plain request, no 400 first
        assert len(server.requests) == 3 and "response_format" not in server.requests[2]


async def test_openai_async_fallback_and_success_path_unwraps():
    pytest.importorskip("openai")
    from fragrel_integrations.models.openai_chat import OpenAIChatModel

    with FakeOpenAIServer(plan=[422]) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, max_retries=0)
        assert await model.ainvoke("x", reply_format=WRITE_FORMAT) == "echo: x"
        assert model.format_refused
    with FakeOpenAIServer() as server:  # a server that accepts response_format: its text is unwrapped
        model = OpenAIChatModel("m", base_url=server.base_url, max_retries=0)
        assert model.invoke('{"answer": "no"}', reply_format=YES_NO_FORMAT) == 'echo: {"answer": "no"}'
        assert not model.format_refused and "response_format" in server.requests[0]


# ----------------------------------------------------------------------------------------------- steps


def test_summariser_asks_enforcing_models_for_the_layout_and_others_as_before():
    layout = "(Summary): Tom buys a boat.\n(Surprise): The boat is glass."
    enforcing = FormatModel(lambda f: layout, free="unused")
    results, report = Summariser(enforcing, show_progress=False).summarise(["A passage about Tom."])
    assert enforcing.formats == [summary_format(300, 150)]
    assert (results[0].summary, results[0].surprise, report.parse_failures) == (
        "Tom buys a boat.",
        "The boat is glass.",
        0,
    )
    duck = DuckModel("(Summary): Free. (Surprise): Odd.")  # one-line layout, now split by the lenient parser
    results, report = Summariser(duck, show_progress=False).summarise(["A passage."])
    assert duck.calls == 1 and (results[0].summary, results[0].surprise, report.parse_failures) == ("Free.", "Odd.", 0)
    off = FormatModel(lambda f: layout, free="(Summary): Free.\n(Surprise): None")
    results, _ = Summariser(off, constrained=False, show_progress=False).summarise(["A passage."])
    assert off.formats == [None] and results[0].summary == "Free."
    with pytest.raises(TypeError, match="constrained"):
        Summariser(off, constrained="yes")  # type: ignore[arg-type]


async def test_summariser_async_passes_the_format_and_keys_the_cache_by_it():
    enforcing = FormatModel(lambda f: "(Summary): A.\n(Surprise): None")
    s = Summariser(enforcing, show_progress=False)
    await s.asummarise(["One passage."])
    assert enforcing.formats == [summary_format(300, 150)]
    plain = Summariser(DuckModel("(Summary): A.\n(Surprise): None"), show_progress=False)
    assert s._cache_key(s._requests(["x"])[0]) != plain._cache_key(plain._requests(["x"])[0])


def test_summary_format_layout_always_parses():
    fmt = summary_format(40, 20)
    for reply in ("(Summary): A b c.\n(Surprise): None", "(Summary): x\n(Surprise): y; z"):
        assert fmt.parse(reply) is not None and parse_summary(reply).ok
    assert fmt.parse("(Summary): " + "a" * 121 + "\n(Surprise): y") is None  # 3 characters per token at most
    assert fmt.parse("Summary: A\nSurprise: B") is None
    with pytest.raises(ValueError, match="summary_tokens"):
        summary_format(0, 5)


def test_scm_gates_and_summary_use_the_formats():
    model = FormatModel(lambda f: "no" if f.kind == "choice" else "Ana likes tea.")
    controller = SCMController(model)
    assert controller.needs_memory("Hello!").value is False
    assert controller.summarize("I like tea.", "Noted.") == "Ana likes tea."
    assert model.formats[0] == YES_NO_FORMAT and model.formats[1].kind == "regex"
    assert model.formats[1].parse("one line") and model.formats[1].parse("two\nlines") is None
    duck = DuckModel("No.")  # unchanged for models without formats
    assert SCMController(duck).needs_memory("Hello!").value is False


def test_scm_memory_passes_formats_through_its_steps():
    from fragrel_integrations.core.scm.memory import SelfControlledMemory

    model = FormatModel(lambda f: "yes" if f.kind == "choice" else "Summary line.", free="Answer.")
    memory = SelfControlledMemory(model, embedder=HashingEmbedder(dim=64), k=2)
    for i in range(3):
        memory.chat(f"Message {i} about tea.")
    kinds = [f.kind if f else None for f in model.formats]
    assert "choice" in kinds and "regex" in kinds and None in kinds  # gates, summaries, and free replies


def test_triplet_writes_and_reads_use_the_formats():
    store = TripletStore(":memory:", embedder=HashingEmbedder(dim=64))
    replies = {"mem_write": "[MEM_WRITE{Mary>>moved to>>bathroom}]", "mem_read": "Mary is in the bathroom."}
    model = FormatModel(lambda f: replies[f.name])
    ctl = TripletMemoryController(model, store, constrained_reads=True)
    assert [tuple(r.triplet) for r in ctl.memorize("Mary moved to the bathroom.").records] == [
        ("Mary", "moved to", "bathroom")
    ]
    assert ctl.answer("Where is Mary?").answer == "Mary is in the bathroom."
    assert model.formats == [WRITE_FORMAT, READ_FORMAT]
    model.formats.clear()
    TripletMemoryController(model, store).answer("Where is Mary?")  # reads are free by default
    assert model.formats == [None]
    free = FormatModel(lambda f: "unused", free="[MEM_WRITE{Ann>>went to>>garden}]")
    ctl = TripletMemoryController(free, store, constrained=False)
    assert [tuple(r.triplet) for r in ctl.memorize("Ann went to the garden.").records] == [("Ann", "went to", "garden")]
    assert free.formats == [None]
    with pytest.raises(TypeError, match="constrained"):
        TripletMemoryController(free, store, constrained=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="constrained_reads"):
        TripletMemoryController(free, store, constrained_reads=None)  # type: ignore[arg-type]


def test_write_format_accepts_calls_and_rejects_copied_sentences():
    assert WRITE_FORMAT.parse("[MEM_WRITE{Mary>>moved to>>bathroom}]\n[MEM_WRITE{Mary>>is in>>bathroom}]")
    assert WRITE_FORMAT.parse("[MEM_WRITE{Mary>>went to the garden, I am not sure>>x}]") is None  # comma
    assert WRITE_FORMAT.parse("[MEM_WRITE{Mary>>went to the garden>>}]") is None  # empty object
    assert WRITE_FORMAT.parse("Sure! [MEM_WRITE{a>>b>>c}]") is None
    assert READ_FORMAT.parse("[MEM_READ{Mary>>is in>>}]") and READ_FORMAT.parse("[MEM_READ{>>is in>>bathroom}]")
    assert READ_FORMAT.parse("Mary is in the bathroom.") and READ_FORMAT.parse("[MEM_READ{a}]") is None


def test_json_formats_round_trip_through_json_dumps():
    schema = {"type": "array", "items": {"type": "string"}, "maxItems": 2}
    fmt = ReplyFormat.json(schema)
    assert fmt.schema == schema and fmt.parse(json.dumps(["a", "b"])) == ["a", "b"]
    assert fmt.parse(json.dumps(["a", "b", "c"])) is None


def test_async_steps_pass_formats():
    model = FormatModel(lambda f: "[MEM_WRITE{Mary>>moved to>>bathroom}]")
    ctl = TripletMemoryController(model, TripletStore(":memory:", embedder=HashingEmbedder(dim=64)))
    result = asyncio.new_event_loop().run_until_complete(ctl.amemorize("Mary moved to the bathroom."))
    assert [tuple(r.triplet) for r in result.records] == [("Mary", "moved to", "bathroom")]
    assert model.formats == [WRITE_FORMAT]


def test_inner_loop_constrained_rounds_ask_for_one_line():
    from fragrel_integrations.core.inner_loop import InnerLoopEngine

    model = FormatModel(lambda f: "The milk is in the hallway.", free="The milk is in the hallway.")
    engine = InnerLoopEngine(lambda q: ["Mary took the milk to the hallway."], model, max_loops=2, show_progress=False)
    assert engine.run("Where is the milk?").answer == "The milk is in the hallway." and model.formats == [None, None]
    constrained = engine.with_settings(constrained=True)
    model.formats.clear()
    result = constrained.run("Where is the milk?")
    assert result.converged and model.formats == [constrained.stm_format()] * 2
    assert constrained.stm_format().parse("One line.") and constrained.stm_format().parse("a\nb") is None
    assert constrained.stm_format().parse("- a list item") is None
    with pytest.raises(TypeError, match="constrained"):
        InnerLoopEngine(lambda q: [], model, constrained="yes")


@pytest.mark.parametrize("max_stm_tokens", [16, 256, 4096])
def test_inner_loop_memory_format_has_a_small_grammar_at_any_memory_size(max_stm_tokens):
    # A length bound in the pattern ({0,1023}) became 1023 nested rules, which llama.cpp's parser refuses; the
    # reply was then not constrained at all. The output limit (max_stm_tokens) bounds the length instead.
    from fragrel_integrations.core.inner_loop import InnerLoopEngine
    from fragrel_integrations.models.llama_cpp_chat import gbnf

    engine = InnerLoopEngine(lambda q: [], ScriptedChatModel([]), max_stm_tokens=max_stm_tokens)
    fmt = engine.stm_format()
    assert len(gbnf(fmt)) < 200, gbnf(fmt)
    assert fmt.parse("x" * (8 * max_stm_tokens)) is not None  # long one-line memories still match


def test_framework_adapters_do_not_enforce_and_ignore_the_format():
    pytest.importorskip("langchain_core")
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    from fragrel_integrations.models.convert import as_chat_model

    model = as_chat_model(FakeListChatModel(responses=["Yes, I think so."]))
    assert not model.supports_format(YES_NO_FORMAT) and format_kwargs(model, YES_NO_FORMAT) == {}
    assert model.invoke("q", reply_format=YES_NO_FORMAT) == "Yes, I think so."  # free text, parsed by the step
    assert SCMController(as_chat_model(FakeListChatModel(responses=["Yes, I think so."]))).needs_memory("q").value
