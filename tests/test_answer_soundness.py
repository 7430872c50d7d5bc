"""A wrong answer never passes as supported (issue 34): the answer is a span of ONE evidence sentence, negations and
numbers agree with it, and the same check runs in the core, the CLI, LangChain, LlamaIndex and the inner loop.
Every case here was printed as a supported answer, or a right one refused, before (checked against the old code)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fragrel_integrations.core.grounding import (
    MAX_EMBEDDED_SENTENCES,
    MAX_QUOTE_WORDS,
    answer_span,
    grounded_answer,
    reply_answer,
    select_evidence,
    split_sentences,
    supported_by,
    word_units,
)
from fragrel_integrations.core.inner_loop import InnerLoopEngine
from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel

KNIFE = "Friday killed the captain with a knife."
WHO = "Who killed the captain?"
CRUSOE = Path(__file__).resolve().parents[1] / "samples" / "robinson_crusoe.txt"


def supported(reply: str, evidence: list[str], question: str) -> bool:
    """The whole workflow with a scripted model: is ``reply`` printed as the answer?"""
    return grounded_answer(question, evidence, ScriptedChatModel([reply]), max_sentences=5).supported


# --- the adversarial replies of the issue, and more of the same kinds -------------------------------------------


@pytest.mark.parametrize(
    ("reply", "evidence", "question"),
    [
        ("Atkins, with a knife", [KNIFE], WHO),  # a wrong name as the reply's first word
        ("Atkins", [KNIFE], WHO),
        ("Atkins killed the captain with a knife.", [KNIFE, "Atkins was a sailor."], WHO),
        ("12 years", ["I was then 12.", "Years went by on the island."], "How long did I stay?"),
        ("twelve years", ["I was twelve.", "Many years went by."], "How long did I stay?"),
        ("Friday saved Robinson", ["Robinson saved Friday."], "Who saved whom?"),
        ("Friday did not kill the captain", ["Friday killed the captain."], "What did Friday do?"),
        ("Friday", ["Friday did not kill the captain."], WHO),  # the sentence denies it
        ("kill the captain", ["Friday did not kill the captain."], "What did Friday do?"),
        ("Friday", ["Friday didn't kill the captain."], WHO),
        ("Friday", ["Friday never killed the captain."], WHO),
        ("Friday", [KNIFE], "Who did not kill the captain?"),  # a negative question, a positive sentence
        ("five years", ["He lived there twenty-five years."], "How long did he live there?"),  # a cut number
        ("200 men", ["There were 1,200 men."], "How many men were there?"),
        ("Friday, who was a cannibal", [KNIFE, "He was a cannibal."], WHO),  # extra words after the span
        ("Friday. Robinson saved Friday.", [KNIFE, "Robinson saved Friday."], WHO),  # two sentences pasted
        ("Atkins, I think.\nAnswer: Friday", [KNIFE], WHO),  # a label after free words: the whole reply is read
        ("Answer: Friday\nBut maybe Atkins.", [KNIFE], WHO),  # words after the answer
        ("And shall I see you again, Helen, when I die?", ["And shall I see you again, Helen, when I die?"],
         "How did my friend Helen die at school?"),  # a question in the text states nothing (Jane Eyre dev)
        ("the captain", [KNIFE], WHO),  # only the question's words
        ("the", [KNIFE], WHO),
        ("", [KNIFE], WHO),
        ("Friday " * 3000, [KNIFE], WHO),  # too long to read
        ("The father advised his son to run away from his father, and not to go to sea.",  # the old notebook
         ["his father, turning to me with a very grave and concerned tone “Young man,” says he, “you ought never "
          "to go to sea any more;”",
          "“And, young man,” said he, “depend upon it, if you do not go back, wherever you go, you will meet with "
          "nothing but disasters and disappointments, till your father’s words are fulfilled upon you.”",
          "a few days wore it all off; and, in short, to prevent any of my father’s further importunities, in a few "
          "weeks after I resolved to run quite away from him."],
         "What did his father advise him to do?"),
        ("星期六", ["我给他取名叫星期五。"], "我给他取了什么名字？"),  # a wrong Chinese answer
        ("他没有杀船长", ["他杀了船长。"], "他做了什么？"),
        ("船長", ["フライデーは船長を殺さなかった。"], "フライデーは誰を殺しましたか？"),  # the sentence denies it
        ("프라이데이", ["프라이데이는 선장을 죽이지 않았다."], "누가 선장을 죽였나요?"),
    ],
)  # fmt: skip
def test_a_wrong_or_unfounded_reply_is_never_supported(reply, evidence, question):
    assert answer_span(reply, evidence, question) is None
    assert supported_by(reply, evidence, question) is None
    assert not supported(reply, evidence, question)


def test_words_of_one_fragment_but_two_sentences_never_combine():
    fragment = "I was then 12. Years went by on the island."
    assert supported_by("12 years", [fragment], "How long?") is None
    assert supported_by("Years went by", [fragment], "What happened?") == 0


# --- right answers in other scripts and layouts ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "evidence", "question", "answer"),
    [
        ("Friday", [KNIFE], WHO, "Friday"),
        ("Answer:\nFriday.", [KNIFE], WHO, "Friday"),  # the reply on the line after the label
        ("Question: Who killed the captain?\nAnswer:\n\n  “friday”", [KNIFE], WHO, "Friday"),
        ("The answer is: Friday!", [KNIFE], WHO, "Friday"),
        ("**Answer:** with a knife", [KNIFE], "How did Friday kill the captain?", "with a knife"),
        ("Ｆｒｉｄａｙ", [KNIFE], WHO, "Friday"),  # full-width letters
        ("Friday did not kill the captain", ["Friday did not kill the captain."], "What did Friday do?",
         "Friday did not kill the captain"),
        ("Friday", ["Friday did not kill the captain."], "Who did not kill the captain?", "Friday"),
        ("twenty-five years", ["He lived there twenty-five years."], "How long did he live there?",
         "twenty-five years"),
        ("星期五", ["鲁滨逊救了一个野人。我给他取名叫星期五，因为那天是星期五。"], "我给野人取了什么名字？", "星期五"),
        ("答案：星期五。", ["我给他取名叫星期五。"], "我给他取了什么名字？", "星期五"),
        ("フライデー", ["彼は船長を殺さなかった。フライデーは船長をナイフで殺した。"], "誰が船長を殺しましたか？",
         "フライデー"),
        ("答え：ナイフで", ["フライデーは船長をナイフで殺した。"], "フライデーは何で船長を殺しましたか？", "ナイフで"),
        ("Пятница", ["Капитана убил Пятница."], "Кто убил капитана?", "Пятница"),
        ("프라이데이", ["프라이데이가 선장을 죽였다."], "누가 선장을 죽였나요?", "프라이데이가"),  # printed as written
    ],
)  # fmt: skip
def test_a_right_answer_in_any_script_or_layout_is_supported(reply, evidence, question, answer):
    result = grounded_answer(question, evidence, ScriptedChatModel([reply]), max_sentences=5)
    assert result.supported and result.text == answer
    assert answer in result.evidence[0].quote  # the cited sentence is the one the span comes from


def test_the_cited_sentence_is_the_one_the_span_comes_from():
    evidence = ["The sea was grey.", "Robinson saved Friday.", "Friday killed the captain."]
    i, a, b = answer_span("Friday killed the captain", evidence, "What happened?")
    assert (i, evidence[i][a:b]) == (2, "Friday killed the captain")
    result = grounded_answer("What happened?", evidence, ScriptedChatModel(["Friday killed the captain"]))
    assert result.evidence[0].quote == "Friday killed the captain."


def test_sentences_and_word_units_of_scripts_without_spaces():
    text = "他叫星期五。她说：“好！”然后下雨了？ नमस्ते। 何がありましたか？ هل أتى؟ نعم"
    assert [text[a:b] for a, b in split_sentences(text)] == [
        "他叫星期五。", "她说：“好！”", "然后下雨了？", "नमस्ते।", "何がありましたか？", "هل أتى؟", "نعم",
    ]  # fmt: skip
    assert [w for _, _, w in word_units("星期五 didn't ‘pay’ 1,200 नमस्ते")] == [
        "星", "期", "五", "didn't", "pay", "1,200", "नमस्ते",
    ]  # fmt: skip
    assert reply_answer("Answer:\n Friday") == "Friday" and reply_answer("x" * 10_000) is None


def test_a_chinese_question_finds_its_sentence():
    fragments = [
        "鲁滨逊在岛上住了很多年。他养了一只鹦鹉。",
        "我救了一个野人。我给他取名叫星期五，因为那天是星期五。天下雨了。",
    ]
    quotes = [e.quote for e in select_evidence("我给野人取了什么名字？", fragments, max_sentences=2)]
    assert "我给他取名叫星期五，因为那天是星期五。" in quotes  # was: whole fragments, unsplit
    result = grounded_answer(
        "我给野人取了什么名字？", fragments, ScriptedChatModel(["星期五"]), embedder=HashingEmbedder()
    )
    assert result.text == "星期五" and result.evidence[0].quote == "我给他取名叫星期五，因为那天是星期五。"


# --- bounded evidence work ---------------------------------------------------------------------------------------


class CountingEmbedder(HashingEmbedder):
    """A hashing embedder that counts the texts it embeds."""

    def __init__(self) -> None:
        super().__init__(dim=64)
        self.embedded = 0

    def embed_documents(self, texts):
        self.embedded += len(texts)
        return super().embed_documents(texts)


def test_at_most_a_fixed_number_of_sentences_is_embedded_per_question():
    fragments = [" ".join(f"Sailor {i}-{j} mended net {j} on the quay." for j in range(100)) for i in range(20)]
    fragments[13] += " The parrot was called Poll."
    embedder = CountingEmbedder()
    evidence = select_evidence("What was the parrot called?", fragments, embedder=embedder, max_sentences=3)
    assert 0 < embedder.embedded <= MAX_EMBEDDED_SENTENCES  # 2,001 sentences, BM25 first
    assert evidence[0].quote == "The parrot was called Poll." and evidence[0].position == 13
    embedder.embedded = 0
    result = grounded_answer("What was the parrot called?", fragments, ScriptedChatModel(["Poll"]), embedder=embedder)
    assert result.text == "Poll" and embedder.embedded <= MAX_EMBEDDED_SENTENCES


def test_a_fragment_without_sentence_ends_gives_bounded_quotes_and_prompt():
    text = " ".join(f"w{i % 997}" for i in range(200_000)) + " the parrot poll lived here"
    model = ScriptedChatModel(["poll lived here"])
    result = grounded_answer("Where did the parrot live?", [text], model, embedder=CountingEmbedder())
    assert all(len(word_units(e.quote)) <= MAX_QUOTE_WORDS for e in result.evidence)
    assert len(model.calls[0]["messages"][1]["content"]) < 4 * MAX_QUOTE_WORDS * 8  # was a 1.3 MB prompt
    assert result.text == "poll lived here"
    chinese = "他" * 5000
    assert all(b - a <= MAX_QUOTE_WORDS for a, b in split_sentences(chinese))


# --- the same check everywhere -----------------------------------------------------------------------------------


def test_the_inner_loop_uses_the_same_check_on_the_shown_sentences():
    story = [KNIFE, "Atkins was a sailor on the ship."]
    guess = InnerLoopEngine(lambda q: story, ScriptedChatModel(["Atkins killed the captain."]), max_loops=1).run(WHO)
    assert not guess.supported and guess.format().startswith("Not supported")  # names anywhere: not support
    split = InnerLoopEngine(lambda q: ["I was then 12. Years went by."], ScriptedChatModel(["12 years"]), max_loops=1)
    assert not split.run("How long?").supported
    right = InnerLoopEngine(lambda q: story, ScriptedChatModel(["Answer:\nFriday"]), max_loops=1).run(WHO)
    assert right.supported and right.to_dict()["supported"]


def test_cli_ask_json_says_unsupported_for_a_wrong_name(tmp_path, capsys):
    from _llm_fixtures import FakeOpenAIServer

    from fragrel_integrations.cli import main

    book = tmp_path / "book.txt"
    book.write_text("The sea was grey and cold. " * 5 + KNIFE + " Atkins was a sailor.", encoding="utf-8")
    argv = ["ask", str(book), WHO, "--scorer", "bm25", "--fragment-words", "40", "-k", "3", "--quiet"]
    with FakeOpenAIServer(reply="Atkins, with a knife") as server:
        assert main([*argv, "--base-url", server.base_url, "--model", "m", "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["supported"] is False and out["answer"] is None and "Atkins" in out["reply"]
    with FakeOpenAIServer(reply="Answer:\nFriday") as server:
        assert main([*argv, "--base-url", server.base_url, "--model", "m", "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["supported"] is True and out["answer"] == "Friday" and out["evidence"][0]["quote"] == KNIFE


def test_langchain_and_llama_index_refuse_the_same_replies():
    from langchain_core.documents import Document
    from langchain_core.runnables import RunnableLambda
    from llama_index.core.schema import NodeWithScore, TextNode

    from fragrel_integrations.langchain import grounded_answer_runnable
    from fragrel_integrations.llama_index import GroundedSynthesizer

    texts = [KNIFE + " Robinson saved Friday.", "I was then 12. Years went by."]
    replies = ["Atkins, with a knife", "Friday saved Robinson", "12 years", "Friday did not kill the captain"]
    docs = [Document(t, metadata={"doc_id": "crusoe", "position": i}) for i, t in enumerate(texts)]
    chain = grounded_answer_runnable(RunnableLambda(lambda q: docs), ScriptedChatModel([*replies, "Friday"]))
    assert [chain.invoke(WHO).supported for _ in replies] == [False] * 4
    assert chain.invoke(WHO).text == "Friday"
    nodes = [NodeWithScore(node=TextNode(text=t), score=1.0) for t in texts]
    synthesizer = GroundedSynthesizer(ScriptedChatModel([*replies, "Answer:\nFriday"]))
    for reply in replies:
        printed = str(synthesizer.synthesize(WHO, nodes))
        assert printed.startswith("The retrieved text does not state") and reply not in printed
    assert str(synthesizer.synthesize(WHO, nodes)).startswith("Friday\n\nEvidence:\n  “Friday killed the captain")


def test_readme_question_on_the_shipped_book_reads_an_answer_on_the_line_after_the_label():
    book = CRUSOE.read_text(encoding="utf-8")
    at = book.index("his name should be Friday")
    passage = book[at - 2000 : at + 1500]  # the fragment the README's retrieval prints
    question = "What name did I give the savage I rescued?"
    result = grounded_answer(question, [passage], ScriptedChatModel(["Answer:\nFriday"]))
    assert result.supported and result.text == "Friday" and "his name should be Friday" in result.evidence[0].quote
    wrong = grounded_answer(question, [passage], ScriptedChatModel(["Friday, the name of the captain"]))
    assert not wrong.supported
