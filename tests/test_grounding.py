"""Grounded answers (core/grounding.py): evidence sentences, the quote grammar, the support check, the
workflow."""

from __future__ import annotations

import asyncio

import pytest

from fragrel_integrations.core.fragments import Fragment, ScoredFragment
from fragrel_integrations.core.grounding import (
    Evidence,
    agrounded_answer,
    answer_messages,
    grounded_answer,
    select_evidence,
    span_grammar,
    split_sentences,
    supported_by,
)
from fragrel_integrations.models.structured import ReplyFormat
from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel

BOOK = [
    Fragment("The ship sank in a storm. I swam to the shore alone. It rained for days.", "crusoe.txt", 3),
    Fragment(
        "I took a man away from the cannibals. I made him know his name should be Friday, which was the day I "
        "saved his life. He was a good servant.",
        "crusoe.txt",
        40,
    ),
]
QUESTION = "What name did I give the savage I rescued?"


class GrammarModel(ScriptedChatModel):
    """A scripted model that says it enforces grammars (as LlamaCppChatModel does) and records the format."""

    def supports_format(self, reply_format):
        return reply_format.kind == "grammar"

    def _generate_format(self, messages, temperature, max_tokens, stop, reply_format):
        self.formats = [*getattr(self, "formats", []), reply_format]
        return self._next(messages, temperature, max_tokens, stop)


def test_split_sentences_keeps_quotes_and_splits_long_sentences_at_semicolons():
    text = "He ran. She said: “Stop!” Then it rained."
    assert [text[a:b] for a, b in split_sentences(text)] == ["He ran.", "She said: “Stop!”", "Then it rained."]
    long = "; ".join(f"clause {i} " + "word " * 10 for i in range(5)).strip() + "."
    parts = [long[a:b] for a, b in split_sentences(long, long_words=20)]
    assert len(parts) == 5 and all(p.startswith("clause") for p in parts)
    assert split_sentences("") == [] and split_sentences("   ") == []
    with pytest.raises(TypeError):
        split_sentences(None)


def test_select_evidence_finds_the_answer_sentence_and_cites_it():
    hits = [ScoredFragment(f, 1.0, 1.0, 0.0) for f in BOOK]
    ev = select_evidence(QUESTION, hits, embedder=HashingEmbedder(), max_sentences=2)
    assert len(ev) == 2 and "Friday" in ev[0].quote
    assert (ev[0].doc_id, ev[0].position, ev[0].sentence) == ("crusoe.txt", 40, 1)
    assert BOOK[1].text[ev[0].start :].startswith(ev[0].quote)
    assert ev[0].citation() == "crusoe.txt, fragment 40, sentence 2"
    assert select_evidence("anything?", ["...", "!!"]) == []


def test_supported_by_needs_a_span_of_one_sentence_with_a_new_word():
    ev = ["I made him know his name should be Friday.", "He was a good servant."]
    assert supported_by("Friday", ev, QUESTION) == 0
    assert supported_by("his name should be Friday.", ev, QUESTION) == 0
    assert supported_by("His name was Friday.", ev, QUESTION) is None  # not the sentence's words (was: supported)
    assert supported_by("a good servant", ev, QUESTION) == 1
    assert supported_by("Saber", ev, QUESTION) is None  # made up
    assert supported_by("his name", ev, QUESTION) is None  # only the question's own words and function words
    assert supported_by("", ev, QUESTION) is None
    assert supported_by("Friday, a good servant", ev, QUESTION) is None  # across sentences (was: supported)
    assert supported_by("Friday, a cruel cannibal king", ev, QUESTION) is None  # most of it made up
    assert supported_by("He went to Friday town", ev, QUESTION) is None  # a name the evidence lacks
    assert supported_by("The answer: Friday 1719", ev, QUESTION) is None  # a number the evidence lacks


def test_grounded_answer_returns_a_supported_answer_with_its_evidence_first():
    model = ScriptedChatModel(["Friday."])
    result = grounded_answer(QUESTION, BOOK, model, embedder=HashingEmbedder())
    assert result.supported and result.text == "Friday"  # the span as the sentence writes it
    assert "Friday" in result.evidence[0].quote
    assert "Friday" in result.format().splitlines()[0] and "crusoe.txt, fragment 40" in result.format()
    sent = model.calls[0]["messages"]
    assert sent == answer_messages(
        QUESTION, [e.quote for e in select_evidence(QUESTION, BOOK, embedder=HashingEmbedder())]
    )
    assert model.calls[0]["temperature"] == 0.0 and model.calls[0]["max_tokens"] == 48


def test_an_unsupported_reply_is_never_the_answer():
    result = grounded_answer(QUESTION, BOOK, ScriptedChatModel(["The savage was called Saber (סברע)."]))
    assert result.text is None and not result.supported
    text = result.format()
    assert "Saber" not in text and "does not state" in text and "fragment 40" in text
    assert result.as_dict()["reply"].startswith("The savage was called Saber")


def test_a_grammar_model_gets_a_quote_grammar_and_others_do_not():
    model = GrammarModel(["Friday"])
    result = grounded_answer(QUESTION, BOOK, model, max_sentences=2, constrain=True)
    assert result.constrained and result.text == "Friday"
    grammar = model.formats[0]
    assert grammar.kind == "grammar" and '"Friday"' in grammar.spec
    free = grounded_answer(QUESTION, BOOK, GrammarModel(["Friday"]), constrain=False)
    assert not free.constrained
    assert not grounded_answer(QUESTION, BOOK, ScriptedChatModel(["Friday"]), constrain=True).constrained
    assert not grounded_answer(QUESTION, BOOK, GrammarModel(["Friday"])).constrained  # off by default


def test_span_grammar_allows_only_runs_of_evidence_words():
    text = span_grammar(["Call him Friday."], max_words=2)
    assert text.splitlines()[0] == "root ::= s0w0 | s0w2"  # no quote starts at a function word
    assert span_grammar(["Call him Friday."], question="Whom did I call?").splitlines()[0] == "root ::= s0w2"
    assert span_grammar(["He was."]).splitlines()[0] == "root ::= s0w0 | s0w1"  # no content word: any word
    assert 's0w1x1 ::= "him"' in text  # a second word ends the quote at max_words
    assert ReplyFormat.grammar(text).kind == "grammar"
    quoted = span_grammar(['He said "no" \\ twice'])
    assert r's0w3 ::= "\\"' in quoted and r'"\""?' in quoted  # backslashes and quotes are escaped
    with pytest.raises(ValueError, match="no words"):
        span_grammar(["..."])


def test_prompt_fits_a_small_context_window():
    model = ScriptedChatModel(["Friday"], context_window=120)
    result = grounded_answer(QUESTION, BOOK, model, max_sentences=3, max_tokens=16)
    assert len(result.evidence) < 3 and result.supported
    with pytest.raises(ValueError, match="context window"):
        grounded_answer(QUESTION, BOOK, ScriptedChatModel(["x"], context_window=60), max_tokens=40)


def test_bad_input_names_the_fix():
    with pytest.raises(TypeError, match="question"):
        grounded_answer(None, BOOK, ScriptedChatModel(["x"]))
    with pytest.raises(ValueError, match="empty"):
        grounded_answer("  ", BOOK, ScriptedChatModel(["x"]))
    with pytest.raises(TypeError, match="not one str"):
        grounded_answer(QUESTION, "a book", ScriptedChatModel(["x"]))
    with pytest.raises(TypeError, match=r"hits\[0\]"):
        grounded_answer(QUESTION, [3], ScriptedChatModel(["x"]))
    with pytest.raises(ValueError, match="max_sentences"):
        select_evidence(QUESTION, BOOK, max_sentences=0)
    with pytest.raises(ValueError, match="max_tokens"):
        grounded_answer(QUESTION, BOOK, ScriptedChatModel(["x"]), max_tokens=0)
    with pytest.raises(TypeError, match="max_sentence"):  # a misspelt setting is not ignored
        grounded_answer(QUESTION, BOOK, ScriptedChatModel(["x"]), max_sentence=2)
    with pytest.raises(TypeError, match="max_sentence"):
        asyncio.run(agrounded_answer(QUESTION, BOOK, ScriptedChatModel(["x"]), max_sentence=2))
    empty = grounded_answer(QUESTION, [], ScriptedChatModel([]))
    assert empty.text is None and empty.evidence == ()


def test_async_version_gives_the_same_answer():
    model = ScriptedChatModel(["Friday", "Friday"])
    sync = grounded_answer(QUESTION, BOOK, model, embedder=HashingEmbedder())
    result = asyncio.run(agrounded_answer(QUESTION, BOOK, model, embedder=HashingEmbedder()))
    assert result == sync and isinstance(result.evidence[0], Evidence)


@pytest.mark.slow
def test_embedded_model_answers_from_a_book_passage(real_embedder):
    from fragrel_integrations.models.transformers_chat import default_chat_model

    result = grounded_answer(QUESTION, BOOK, default_chat_model(), embedder=real_embedder, constrain=True)
    assert not result.constrained  # the transformers runtime enforces no GBNF: the free reply is checked
    if result.text is not None:  # whatever it says must be a supported quote
        assert supported_by(result.text, [e.quote for e in result.evidence], QUESTION) is not None
    assert "Friday" in " ".join(e.quote for e in result.evidence)


def test_langchain_runnable_cites_document_metadata_and_runs_async():
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document
    from langchain_core.runnables import RunnableLambda

    from fragrel_integrations.langchain import grounded_answer_runnable
    from fragrel_integrations.langchain.answer import documents_to_fragments

    docs = [
        Document(BOOK[1].text, metadata={"doc_id": "crusoe.txt", "position": 40}),
        Document("It rained for days. The sea was grey."),
    ]
    model = ScriptedChatModel(["Friday", "Saber"])
    chain = grounded_answer_runnable(RunnableLambda(lambda q: docs), model, embedder=HashingEmbedder())
    result = chain.invoke(QUESTION)
    assert result.text == "Friday" and result.evidence[0].citation() == "crusoe.txt, fragment 40, sentence 2"
    assert "Friday" in model.calls[0]["messages"][1]["content"]
    later = asyncio.run(chain.ainvoke(QUESTION))
    assert later.text is None and "does not state" in later.format()
    assert [(f.doc_id, f.position) for f in documents_to_fragments(docs)] == [("crusoe.txt", 40), ("retrieved", 1)]
    with pytest.raises(TypeError, match="Document"):
        documents_to_fragments(["not a document"])
    retriever = RunnableLambda(lambda q: docs)
    with pytest.raises(TypeError, match="max_sentence"):  # checked when the chain is built, not at the first call
        grounded_answer_runnable(retriever, model, max_sentence=2)
    with pytest.raises(ValueError, match="max_tokens"):
        grounded_answer_runnable(retriever, model, max_tokens=0)
    with pytest.raises(TypeError, match="constrain"):
        grounded_answer_runnable(retriever, model, constrain="yes")
    with pytest.raises(TypeError, match="options"):
        grounded_answer_runnable(retriever, model, options=["seed", 1])
    with pytest.raises(ValueError, match="position_key"):
        grounded_answer_runnable(retriever, model, position_key=["position"])


def _crusoe_engine(model, **kwargs):
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.schema import TextNode

    from fragrel_integrations.llama_index import GroundedSynthesizer

    nodes = [TextNode(text=f.text, metadata={"doc_id": f.doc_id, "position": f.position}) for f in BOOK]
    nodes.append(TextNode(text="The goats ran up the hill. It rained for days."))  # no position: cited by rank
    index = VectorStoreIndex(nodes, embed_model=MockEmbedding(embed_dim=8))
    synthesizer = GroundedSynthesizer(model, embed_model=HashingEmbedder(), **kwargs)
    return RetrieverQueryEngine(index.as_retriever(similarity_top_k=3), response_synthesizer=synthesizer)


def test_llama_index_query_engine_replies_only_with_a_supported_cited_answer():
    from llama_index.core.base.response.schema import AsyncStreamingResponse, Response, StreamingResponse

    model = ScriptedChatModel(["Friday", "Saber", "Friday"])
    engine = _crusoe_engine(model)
    response = engine.query(QUESTION)
    assert isinstance(response, Response) and len(response.source_nodes) == 3
    assert str(response).startswith("Friday") and "(crusoe.txt, fragment 40, sentence 2)" in str(response)
    assert "Friday" in model.calls[0]["messages"][1]["content"]  # the evidence went to the model
    unsupported = asyncio.run(engine.aquery(QUESTION))  # "Saber" is nowhere in the nodes: never the reply
    assert "Saber" not in str(unsupported) and "does not state" in str(unsupported)
    streamed = _crusoe_engine(ScriptedChatModel(["Friday"]), streaming=True).query(QUESTION)
    assert isinstance(streamed, StreamingResponse)
    assert "".join(streamed.response_gen).startswith("Friday")
    engine = _crusoe_engine(ScriptedChatModel(["Friday"]), streaming=True)
    astreamed = asyncio.run(engine.aquery(QUESTION))
    assert isinstance(astreamed, AsyncStreamingResponse)

    async def collect():
        return "".join([token async for token in astreamed.async_response_gen()])

    assert asyncio.run(collect()).startswith("Friday")


def test_llama_index_synthesizer_cites_by_rank_and_checks_its_settings_when_built():
    from llama_index.core.schema import NodeWithScore, TextNode

    from fragrel_integrations.llama_index import GroundedSynthesizer

    synthesizer = GroundedSynthesizer(ScriptedChatModel(["Poll", "Poll", "Poll"]), max_sentences=1)
    node = NodeWithScore(node=TextNode(text="Her parrot was called Poll."), score=0.5)
    assert "(retrieved, fragment 0, sentence 1)" in str(synthesizer.synthesize("What was the parrot called?", [node]))
    wrapped = NodeWithScore(node=TextNode(text="Her parrot\nwas called\n Poll."), score=0.5)
    assert "“Her parrot was called Poll.”" in str(synthesizer.synthesize("What was the parrot called?", [wrapped]))
    direct = synthesizer.get_response("What was the parrot called?", ["Her parrot was called Poll."])
    assert direct.startswith("Poll\n") and "(retrieved, fragment 0, sentence 1)" in direct
    with pytest.raises(TypeError, match="max_sentence"):
        GroundedSynthesizer(ScriptedChatModel([]), max_sentence=2)
    with pytest.raises(ValueError, match="max_tokens"):
        GroundedSynthesizer(ScriptedChatModel([]), max_tokens=0)
    with pytest.raises(ValueError, match="doc_id_key"):  # metadata keys are checked when it is built
        GroundedSynthesizer(ScriptedChatModel([]), doc_id_key="")
    with pytest.raises(ValueError, match="must differ"):
        GroundedSynthesizer(ScriptedChatModel([]), doc_id_key="k", position_key="k")
    with pytest.raises(TypeError, match=r"nodes\[0\]"):
        synthesizer.synthesize("q", ["not a node"])
