"""Constrained replies with the REAL embedded SmolLM2-135M (llama.cpp grammars) and llama-cpp-python's server."""

from __future__ import annotations

import pytest
from _llm_fixtures import SERVER_MODEL, get_embedded, get_llama_cpp, get_server

from fragrel_integrations.core.scm.memory_controller import YES_NO_FORMAT, SCMController
from fragrel_integrations.core.tree.summariser import Summariser
from fragrel_integrations.core.tree.summary import summary_format
from fragrel_integrations.core.triplets import TripletStore
from fragrel_integrations.core.triplets.triplet_controller import TripletMemoryController
from fragrel_integrations.models.llama_cpp_chat import gbnf
from fragrel_integrations.models.structured import ReplyFormat
from fragrel_integrations.testing import HashingEmbedder

pytestmark = pytest.mark.slow

PASSAGES = [
    "The captain ordered the crew to lower the boats at dawn. Nobody noticed that the cook had hidden a goat in the "
    "longboat, and it ate half of the biscuits before they reached the island.",
    "Maria kept bees on the roof of the bank where she worked. Every spring the manager complained, yet he bought "
    "twelve jars of her honey for the annual meeting.",
    "The old lighthouse on the cape was switched off in 1962. Fishermen still see a light there on foggy nights, "
    "although the lamp was removed and sold to a museum in Oslo.",
    "Tom planted potatoes, beans and maize in the valley. The beans failed, but the maize grew so tall that he used "
    "the stalks to build a fence against the goats.",
    "At the chess club the youngest member, a boy of nine, beat the champion in twenty moves. He said he had learned "
    "the opening from a cartoon.",
]


@pytest.fixture(scope="module")
def llm():
    """The grammar-constrained runtime (llama.cpp): the transformers default enforces choices only."""
    return get_llama_cpp()


def test_every_tree_summary_parses_under_the_layout_grammar(llm):
    summariser = Summariser(llm, summary_tokens=60, surprise_tokens=30, show_progress=False)
    fmt = summary_format(60, 30)
    assert llm.supports_format(fmt)
    results, report = summariser.summarise(PASSAGES)
    assert report.parse_failures == 0 and report.call_failures == 0
    assert all(r.parsed and r.summary for r in results)
    for r in results:  # each section fits its bound
        assert len(r.summary) <= 3 * 60 and len(r.surprise) <= 3 * 30


def test_triplet_extraction_of_babi_sentences_gets_subject_and_place(llm):
    store = TripletStore(":memory:", embedder=HashingEmbedder(dim=64))
    ctl = TripletMemoryController(llm, store)
    for sentence, subject, place in [
        ("Mary moved to the bathroom.", "Mary", "bathroom"),
        ("Daniel went back to the hallway.", "Daniel", "hallway"),
        ("Sandra journeyed to the garden.", "Sandra", "garden"),
    ]:
        result = ctl.memorize(sentence)
        triplets = [tuple(r.triplet) for r in result.records]
        assert triplets, result.reply
        t1, _, t3 = triplets[0]
        assert t1 == subject and place in t3, triplets


def test_inner_loop_memory_is_one_line_under_the_llama_cpp_grammar(llm):
    from fragrel_integrations.core.inner_loop import InnerLoopEngine
    from fragrel_integrations.models.structured import format_kwargs

    passages = ["Mary picked up the milk.", "Mary went to the hallway.", "Daniel journeyed to the office."]
    engine = InnerLoopEngine(lambda q: passages, llm, max_loops=2, constrained=True, show_progress=False)
    fmt = engine.stm_format()
    assert llm.supports_format(fmt) and format_kwargs(llm, fmt) == {"reply_format": fmt}  # llama.cpp accepts it
    result = engine.run("Where is the milk?")
    for r in result.rounds:
        assert fmt.parse(r.reply) is not None, r.reply  # one line, starting with a letter, digit or quote


def test_yes_no_gate_replies_exactly_a_label(llm):
    controller = SCMController(llm, decision="text")  # the text path (by default this model answers by P(yes))
    for question in ("Hello, how are you?", "What was the name of the book I told you about?"):
        decision = controller.needs_memory(question)
        assert decision.parsed and decision.raw in ("yes", "no")


def test_json_schema_and_choice_formats_parse(llm):
    fmt = ReplyFormat.json(
        {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 40}},
            "required": ["city"],
            "additionalProperties": False,
        }
    )
    reply = llm.invoke("What is the capital of France? Answer in JSON.", max_tokens=40, reply_format=fmt)
    assert isinstance(fmt.parse(reply), dict), reply
    colour = ReplyFormat.choice(["red", "green", "blue"])
    assert colour.parse(llm.invoke("Which colour is grass?", max_tokens=4, reply_format=colour)) is not None


def test_a_grammar_llama_cpp_cannot_parse_is_refused_not_a_crash(llm):
    bad = ReplyFormat.grammar("root ::= undefined-rule")
    assert not llm.supports_format(bad)
    assert isinstance(llm.invoke("Say hi.", max_tokens=4, reply_format=bad), str)  # free text instead
    with pytest.raises(ValueError, match="cannot translate"):
        gbnf(ReplyFormat.regex("a(?=b)"))  # a look-ahead: the converter has no equivalent


def test_llama_cpp_python_server_refuses_json_schema_and_the_model_falls_back():
    from fragrel_integrations.models.openai_chat import OpenAIChatModel

    server = get_server()
    model = OpenAIChatModel(SERVER_MODEL, base_url=server.base_url, timeout=60, seed=0)
    reply = model.invoke("Is the sky blue? Reply yes or no.", max_tokens=4, reply_format=YES_NO_FORMAT)
    assert isinstance(reply, str) and reply  # answered in plain text after the refusal
    assert model.format_refused and not model.supports_format(YES_NO_FORMAT)


def test_the_transformers_runtime_enforces_choices_and_regexes_and_parses_the_rest_freely():
    model = get_embedded()
    yes_no = ReplyFormat.choice(["yes", "no"], name="yes_no")
    assert model.supports_format(yes_no) and model.supports_format(summary_format(60, 30))
    assert not model.supports_format(ReplyFormat.grammar('root ::= "x"'))
    assert not model.supports_format(ReplyFormat.json({"type": "object"}))
    reply = model.invoke("Is the sky blue? Answer yes or no.", reply_format=yes_no, max_tokens=4)
    assert reply in ("yes", "no")
