"""`fragrel ask`: FragRel retrieval + an answer from the embedded LLM or an OpenAI-compatible server."""

from __future__ import annotations

import json

import pytest
from _llm_fixtures import SERVER_MODEL, FakeOpenAIServer, free_port, get_server

from fragrel_integrations.cli import build_parser, main
from fragrel_integrations.core.grounding import ANSWER_PROMPT, supported_by
from fragrel_integrations.models.tokens import count_message_tokens

FILLER = [
    "The lighthouse keeper polished the great lamp every evening before the sun went down.",
    "Fishing boats came back to the harbour with nets full of silver herring.",
    "The old baker sold warm bread to the villagers at dawn.",
    "Children played on the beach and built castles out of wet sand.",
]
FACT = "Mary went to the kitchen. Mary picked up the red apple in the kitchen."


@pytest.fixture
def book(tmp_path):
    paragraphs = [FILLER[i % 4] + " " + FILLER[(i + 1) % 4] for i in range(12)]
    paragraphs.insert(7, FACT)
    path = tmp_path / "book.txt"
    path.write_text("\n\n".join(paragraphs), encoding="utf-8")
    return path


BASE = ["--scorer", "bm25", "--fragment-words", "16", "-k", "3", "--quiet"]
WHOLE = ["--scorer", "bm25", "--fragment-words", "60", "-k", "3", "--quiet"]  # the fact's sentences stay whole


def run_json(capsys, argv):
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def test_help_lists_ask():
    text = build_parser().format_help()
    assert "ask" in text and "retrieve" in text


def test_ask_against_server_sends_evidence_and_prints_a_supported_answer(book, capsys):
    with FakeOpenAIServer(reply="Mary went to the kitchen.") as server:
        out = run_json(
            capsys,
            ["ask", str(book), "Where did Mary go?", *WHOLE, "--base-url", server.base_url, "--model", "m",
             "--max-tokens", "7", "--json"],
        )  # fmt: skip
        body = server.requests[0]
    assert out["model"] == "m" and out["answer"] == "Mary went to the kitchen" and out["supported"]
    assert "kitchen" in out["evidence"][0]["quote"] and out["evidence"][0]["doc_id"] == "book.txt"
    assert any("kitchen" in f["text"] for f in out["fragments"]) and out["retrieved"] == 3
    assert body["max_tokens"] == 7 and body["temperature"] == 0.0 and body["seed"] == 0
    assert "response_format" not in body  # a server gets no grammar; the support check still applies
    assert body["messages"][0]["content"] == ANSWER_PROMPT
    user = body["messages"][1]["content"]
    assert "Mary went to the kitchen." in user and user.endswith("Question: Where did Mary go?")
    assert len(user.split()) < 60  # the best sentences, not whole fragments


def test_ask_text_output_quotes_and_cites_the_evidence(book, capsys):
    with FakeOpenAIServer(reply="the kitchen") as server:
        code = main(["ask", str(book), "Where did Mary go?", *WHOLE, "--base-url", server.base_url, "--model", "m"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("the kitchen\n\nEvidence:\n  “Mary went to the kitchen.” (book.txt, fragment ")
    assert "Fragments retrieved (3):" in out and "#1 book.txt[" in out


def test_ask_never_prints_an_unsupported_answer(book, capsys):
    with FakeOpenAIServer(reply="Mary flew to the moon on a dragon.") as server:
        code = main(["ask", str(book), "Where did Mary go?", *WHOLE, "--base-url", server.base_url, "--model", "m"])
        out = capsys.readouterr().out
        assert code == 0 and "moon" not in out and "dragon" not in out
        assert out.startswith("The retrieved text does not state an answer to this question.\nClosest passages:")
        assert "“Mary went to the kitchen.”" in out
        data = run_json(capsys, ["ask", str(book), "Where did Mary go?", *WHOLE, "--base-url", server.base_url,
                                 "--model", "m", "--json"])  # fmt: skip
    assert data["answer"] is None and not data["supported"] and "moon" in data["reply"]


def test_ask_fits_evidence_into_a_small_window(book, capsys):
    with FakeOpenAIServer(reply="kitchen") as server:
        out = run_json(
            capsys,
            ["ask", str(book), "Where did Mary go?", "--scorer", "bm25", "--fragment-words", "40", "-k", "5",
             "--quiet", "--base-url", server.base_url, "--model", "m", "--context-window", "130",
             "--max-tokens", "32", "--json"],
        )  # fmt: skip
        body = server.requests[0]
    assert out["retrieved"] == 5 and out["evidence"] and out["answer"] == "kitchen"
    assert count_message_tokens(None, body["messages"]) <= 130 - 32


def test_ask_window_too_small_is_a_clear_error(book, capsys):
    code = main(["ask", str(book), "q", *BASE, "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                 "--context-window", "100", "--max-tokens", "90"])  # fmt: skip
    assert code == 2 and "--context-window" in capsys.readouterr().err


def test_ask_base_url_needs_model(book, capsys):
    assert main(["ask", str(book), "q", *BASE, "--base-url", "http://127.0.0.1:9/v1"]) == 2
    assert "--model" in capsys.readouterr().err


def test_ask_unreachable_server(book, capsys):
    url = f"http://127.0.0.1:{free_port()}/v1"
    code = main(["ask", str(book), "q", *BASE, "--base-url", url, "--model", "m", "--max-retries", "0"])
    err = capsys.readouterr().err
    assert code == 3 and "cannot reach" in err and url in err


def test_ask_server_error_status(book, capsys):
    with FakeOpenAIServer(plan=[404]) as server:
        code = main(["ask", str(book), "q", *BASE, "--base-url", server.base_url, "--model", "nope"])
    assert code == 3 and "404" in capsys.readouterr().err


@pytest.mark.slow
def test_ask_with_embedded_model(book, capsys):
    out = run_json(capsys, ["ask", str(book), "Where did Mary go?", *WHOLE, "--max-tokens", "24", "--json"])
    assert out["model"] == "SmolLM2-135M-Instruct.Q4_1" and not out["constrained"]
    quotes = [e["quote"] for e in out["evidence"]]
    assert any("kitchen" in q for q in quotes)
    if out["answer"] is not None:  # whatever it prints is supported by the quoted evidence
        assert supported_by(out["answer"], quotes, "Where did Mary go?") is not None


@pytest.mark.slow
def test_ask_with_local_openai_compatible_server(book, capsys):
    server = get_server()
    out = run_json(
        capsys,
        ["ask", str(book), "Where did Mary go?", *WHOLE, "--base-url", server.base_url, "--model", SERVER_MODEL,
         "--max-tokens", "24", "--json"],
    )  # fmt: skip
    assert out["model"] == SERVER_MODEL and not out["constrained"]
    quotes = [e["quote"] for e in out["evidence"]]
    assert any("kitchen" in q for q in quotes)
    assert out["answer"] is None or supported_by(out["answer"], quotes, "Where did Mary go?") is not None


@pytest.mark.parametrize("window", ["0", "-5"])
def test_ask_context_window_below_one_is_refused_before_any_model(book, capsys, window):
    code = main(["ask", str(book), "q", *BASE, "--context-window", window])
    err = capsys.readouterr().err
    assert code == 2 and "--context-window must be >= 1" in err
