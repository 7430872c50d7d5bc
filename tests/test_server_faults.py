"""A misbehaving OpenAI-compatible server (127.0.0.1 only) against OpenAIChatModel, OpenAIEmbedder and the CLI.

``timeout`` is one deadline per request, retries included: a server that sends one byte every 0.5 s (status
line and headers, or the body) or never answers ends in a TimeoutError within it. Every reply is checked before
use (errors name the server), HTTP errors are one-line CLI errors, and a key from the environment stays with
the host it belongs to.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest
from _fault_server import FaultServer, Reply, chat_reply, embeddings_reply, sse_reply

from fragrel_integrations.cli import main

openai = pytest.importorskip("openai")

from fragrel_integrations.models import OpenAIEmbedder  # noqa: E402
from fragrel_integrations.models.openai_chat import PLACEHOLDER_KEY, OpenAIChatModel, resolve_endpoint  # noqa: E402

TEXT = chat_reply({"role": "assistant", "content": "fine"})
DRIP = 0.5  # seconds per byte
LIMIT = 3.0  # a 1 s deadline must end well within this
HELD = 1 + 2 * DRIP  # how long a server may hold a client with a 1 s deadline (it notices the close at its next byte)


def _embeddings(path, body):
    return embeddings_reply([[0.5, 0.25, 1.0] for _ in body["input"]])


def dripping(reply: Reply, headers: bool) -> Reply:
    reply.drip, reply.drip_headers = DRIP, headers
    return reply


def timed(fn):
    start = time.perf_counter()
    try:
        fn()
    except Exception as exc:  # the test checks what it is
        return exc, time.perf_counter() - start
    return None, time.perf_counter() - start


# -------------------------------------------------------------------------------------------- deadlines


@pytest.mark.parametrize("headers", [True, False], ids=["dripped-headers", "dripped-body"])
def test_chat_drip_ends_within_the_deadline(headers):
    with FaultServer(lambda p, b: dripping(chat_reply({"role": "assistant", "content": "x" * 200}), headers),
                     max_seconds=8) as server:  # fmt: skip
        model = OpenAIChatModel("m", base_url=server.base_url, timeout=1)  # default retries: 3
        err, elapsed = timed(lambda: model.invoke("hi"))
    assert isinstance(err, TimeoutError), err
    assert server.base_url in str(err) and "within 1s" in str(err) and "\n" not in str(err)
    assert elapsed < LIMIT and len(server.held) == 1 and server.held[0] < HELD  # one attempt, then let go


@pytest.mark.parametrize("headers", [True, False], ids=["dripped-headers", "dripped-body"])
def test_embedder_drip_ends_within_the_deadline(headers):
    with FaultServer(lambda p, b: dripping(_embeddings(p, b), headers), max_seconds=8) as server:
        emb = OpenAIEmbedder("m", base_url=server.base_url, timeout=1)
        err, elapsed = timed(lambda: emb.embed_documents(["a", "b"]))
    assert isinstance(err, TimeoutError) and server.base_url in str(err), err
    assert elapsed < LIMIT and len(server.held) == 1 and server.held[0] < HELD


async def test_async_chat_drip_ends_within_the_deadline():
    with FaultServer(lambda p, b: dripping(chat_reply({"role": "assistant", "content": "x" * 200}), True),
                     max_seconds=8) as server:  # fmt: skip
        model = OpenAIChatModel("m", base_url=server.base_url, timeout=1)
        start = time.perf_counter()
        with pytest.raises(TimeoutError, match="within 1s"):
            await model.ainvoke("hi")
        assert time.perf_counter() - start < LIMIT


def _chunk(content, finish=None):
    choice = {"index": 0, "delta": {"content": content}, "finish_reason": finish}
    return {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [choice]}


def test_stream_drip_ends_within_the_deadline_sync_and_async():
    reply = sse_reply([_chunk("tok ") for _ in range(40)] + [_chunk("", "stop")])
    with FaultServer(lambda p, b: dripping(Reply(**{**reply.__dict__}), False), max_seconds=8) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, timeout=1)
        err, elapsed = timed(lambda: list(model.stream("hi")))
        assert isinstance(err, TimeoutError) and elapsed < LIMIT, (err, elapsed)

        async def consume():
            return [piece async for piece in model.astream("hi")]

        err, elapsed = timed(lambda: asyncio.run(consume()))
        assert isinstance(err, TimeoutError) and elapsed < LIMIT, (err, elapsed)


def test_silent_server_ends_within_the_deadline():
    with FaultServer(lambda p, b: Reply(silent=True), max_seconds=8) as server:
        emb = OpenAIEmbedder("m", base_url=server.base_url, timeout=1)
        err, elapsed = timed(lambda: emb.embed_query("a"))
        assert isinstance(err, TimeoutError) and elapsed < LIMIT, (err, elapsed)
        model = OpenAIChatModel("m", base_url=server.base_url, timeout=1)
        err, elapsed = timed(lambda: model.invoke("hi"))
        assert isinstance(err, TimeoutError) and elapsed < LIMIT, (err, elapsed)


def test_a_fast_server_is_untouched_by_the_deadline_and_connections_are_not_leaked():
    with FaultServer(lambda p, b: _embeddings(p, b) if p.endswith("/embeddings") else TEXT) as server:
        emb = OpenAIEmbedder("m", base_url=server.base_url, timeout=1, batch_size=1)
        assert emb.embed_documents([f"t{i}" for i in range(20)]).shape == (20, 3)
        model = OpenAIChatModel("m", base_url=server.base_url, timeout=1)
        assert [model.invoke("hi") for _ in range(5)] == ["fine"] * 5
        time.sleep(1.2)  # past every deadline: the timers must not break a later request
        assert model.invoke("hi") == "fine"


# -------------------------------------------------------------------------------------------- the CLI


@pytest.fixture
def book(tmp_path):
    path = tmp_path / "book.txt"
    path.write_text("\n\n".join(f"Chapter {i}. " + "words " * 80 for i in range(3)), encoding="utf-8")
    return path


def _retrieve(book, server, *extra):
    argv = ["retrieve", str(book), "q", "--no-cache", "--quiet", "--embed-model", "m", "--embed-base-url"]
    return main([*argv, server.base_url, *extra])


def one_line_error(capsys) -> str:
    """The one error line (retries may be announced before it, each on a ``fragrel: warning:`` line)."""
    *warnings, err = capsys.readouterr().err.strip().splitlines()
    assert all(w.startswith("fragrel: warning: ") for w in warnings), warnings
    assert err.startswith("fragrel: error: ") and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("reply", [Reply(silent=True), dripping(embeddings_reply([[0.5] * 3]), True)])
def test_cli_retrieve_timeout_bounds_a_stuck_embeddings_server(book, reply, capsys):
    with FaultServer(lambda p, b: reply, max_seconds=8) as server:
        assert _retrieve(book, server, "--timeout", "1") == 2
    assert server.held and max(server.held) < HELD  # the CLI's own start-up is not the server's doing
    err = one_line_error(capsys)
    assert server.base_url in err and "--timeout" in err and "timeout=..." in err


def test_cli_timeout_options_are_checked(book, capsys):
    assert main(["retrieve", str(book), "q", "--no-cache", "--timeout", "5"]) == 2
    assert "--timeout bounds requests to a server: add --embed-base-url" in one_line_error(capsys)
    for bad in ("0", "-1", "inf"):
        assert main(["retrieve", str(book), "q", "--no-cache", "--timeout", bad, "--embed-model", "m",
                     "--embed-base-url", "http://127.0.0.1:9/v1"]) == 2  # fmt: skip
        assert "--timeout must be positive seconds" in one_line_error(capsys)


def test_cli_ask_timeout_reaches_the_embedder(book, capsys):
    with FaultServer(lambda p, b: Reply(silent=True), max_seconds=8) as server:
        argv = ["ask", str(book), "q", "--no-cache", "--quiet", "--base-url", server.base_url, "--model", "m"]
        assert main([*argv, "--embed-model", "e", "--embed-base-url", server.base_url, "--timeout", "1"]) == 2
    assert server.held and max(server.held) < HELD
    assert "did not answer within 1s" in one_line_error(capsys)


def test_cli_ask_timeout_bounds_a_dripping_chat_server(book, capsys):
    reply = dripping(chat_reply({"role": "assistant", "content": "x" * 200}), True)
    with FaultServer(lambda p, b: reply, max_seconds=8) as server:
        argv = ["ask", str(book), "q", "--no-cache", "--quiet", "--scorer", "bm25", "--base-url", server.base_url]
        assert main([*argv, "--model", "m", "--timeout", "1"]) != 0
    assert server.held and max(server.held) < HELD
    err = one_line_error(capsys)
    assert server.base_url in err and "within 1s" in err and "--timeout" in err


@pytest.mark.parametrize(
    ("status", "words"),
    [(401, ["answered HTTP 401", "API key was refused", "--embed-api-key"]), (500, ["answered HTTP 500 after"])],
)
def test_cli_http_errors_from_the_embeddings_server_are_one_line(book, status, words, capsys):
    body = json.dumps({"error": {"message": f"planned {status}"}}).encode()
    with FaultServer(lambda p, b: Reply(status=status, body=body)) as server:
        assert _retrieve(book, server, "--timeout", "2") == 2
    err = one_line_error(capsys)
    assert server.base_url in err and all(w in err for w in words), err


def test_chat_model_http_errors_name_the_server_and_keep_their_type():
    body = json.dumps({"error": {"message": "invalid key"}}).encode()
    with (
        FaultServer(lambda p, b: Reply(status=401, body=body)) as server,
        pytest.raises(openai.AuthenticationError) as err,
    ):
        OpenAIChatModel("m", base_url=server.base_url).invoke("hi")
    assert err.value.status_code == 401
    assert f"server at {server.base_url} answered HTTP 401" in str(err.value) and "api_key=" in str(err.value)


# -------------------------------------------------------------------------------------------- reply shapes


@pytest.mark.parametrize(
    ("reply", "error", "message"),
    [
        (Reply(body=b"{not json"), ValueError, "not JSON"),
        (Reply(body=b"[1, 2]"), ValueError, "not an object"),
        (Reply(body=b'{"object": "list"}'), ValueError, "without choices"),
        (chat_reply(None), ValueError, "without a message"),
        (chat_reply({"role": "assistant", "content": 42}), ValueError, "content of type int"),
        (chat_reply({"role": "assistant", "content": [1, 2]}), ValueError, "content of type list"),
        (chat_reply({"role": "assistant", "content": {"a": 1}}), ValueError, "content of type dict"),
        (
            chat_reply(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "1", "type": "function", "function": {"name": "search", "arguments": "{}"}}],
                }
            ),
            ValueError,
            r"tool call \(search\) instead of text",
        ),
        (chat_reply({"role": "assistant", "content": "", "refusal": "no"}), ValueError, "refused to answer"),
        (Reply(body=b'{"choices": [', cut=True), ConnectionError, "broke off its reply"),
    ],
    ids=["bad-json", "json-list", "no-choices", "null-message", "int", "list", "dict", "tool-call", "refusal", "cut"],
)
def test_malformed_chat_replies_are_errors_naming_the_server(reply, error, message):
    with FaultServer(lambda p, b: reply) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, max_retries=0)
        with pytest.raises(error, match=message) as err:
            model.invoke("hi")
        assert server.base_url in str(err.value) and "\n" not in str(err.value)

        async def run():
            return await model.ainvoke("hi")

        with pytest.raises(error, match=message):
            asyncio.run(run())


def test_text_parts_are_joined():
    parts = [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]
    with FaultServer(lambda p, b: chat_reply({"role": "assistant", "content": parts})) as server:
        assert OpenAIChatModel("m", base_url=server.base_url).invoke("hi") == "Hello"


@pytest.mark.parametrize(
    ("chunks", "done", "message"),
    [
        ([_chunk("Hel"), _chunk("lo")], False, "ended its stream before the reply was finished"),
        ([_chunk(7, "stop")], True, "streamed content of type int"),
    ],
    ids=["cut", "int"],
)
def test_malformed_streams_are_errors_naming_the_server(chunks, done, message):
    with FaultServer(lambda p, b: sse_reply(chunks, done=done)) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, max_retries=0)
        with pytest.raises(ValueError, match=message) as err:
            list(model.stream("hi"))
        assert server.base_url in str(err.value)


def test_a_whole_stream_still_streams():
    chunks = [_chunk("Hel"), _chunk("lo"), _chunk(None, "stop")]
    with FaultServer(lambda p, b: sse_reply(chunks)) as server:
        assert list(OpenAIChatModel("m", base_url=server.base_url).stream("hi")) == ["Hel", "lo"]


def test_cli_ask_with_a_tool_call_reply_is_an_error_not_an_empty_answer(book, capsys):
    call = {"id": "1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    reply = chat_reply({"role": "assistant", "content": None, "tool_calls": [call]})
    with FaultServer(lambda p, b: reply) as server:
        argv = ["ask", str(book), "q", "--no-cache", "--quiet", "--scorer", "bm25", "--base-url", server.base_url]
        assert main([*argv, "--model", "m", "--max-retries", "0"]) != 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "tool call (lookup) instead of text" in captured.err and server.base_url in captured.err


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (Reply(body=b"{not json"), "not JSON"),
        (Reply(body=b'{"object": "list", "data": null}'), "without a list of embeddings"),
        (embeddings_reply([[0.1, 0.2], [0.3, 0.4]], index=False), "without an integer 'index'"),
        (Reply(body=json.dumps({"data": [{"index": "0", "embedding": [0.1]}]}).encode()), "integer 'index'"),
        (Reply(body=json.dumps({"data": [{"index": True, "embedding": [0.1]}]}).encode()), "integer 'index'"),
        (embeddings_reply([[0.1, "0.2"], [0.3, 0.4]]), "a value is str"),
        (embeddings_reply([[0.1, None], [0.3, 0.4]]), "a value is NoneType"),
        (Reply(body=b'{"data": [', cut=True), "broke off its reply"),
    ],
    ids=["bad-json", "null-data", "no-index", "str-index", "bool-index", "str", "none", "cut"],
)
def test_malformed_embedding_replies_are_errors_naming_the_server(reply, message):
    with FaultServer(lambda p, b: reply) as server:
        emb = OpenAIEmbedder("m", base_url=server.base_url, max_retries=0)
        with pytest.raises((ValueError, ConnectionError), match=message) as err:
            emb.embed_documents(["one", "two"])
    assert server.base_url in str(err.value)


def test_zero_vectors_are_reported_once(caplog):
    rows = {"a": [0.0, 0.0, 0.0], "b": [0.5, 0.1, 0.0]}
    with FaultServer(lambda p, b: embeddings_reply([rows[t] for t in b["input"]])) as server:
        emb = OpenAIEmbedder("m", base_url=server.base_url)
        with caplog.at_level(logging.WARNING, logger="fragrel_integrations.models.openai_embeddings"):
            assert emb.embed_documents(["a", "b"]).shape == (2, 3)
            emb.embed_query("a")
            emb.embed_query("b")
    zero = [r.getMessage() for r in caplog.records if "all-zero" in r.getMessage()]
    assert len(zero) == 1 and "1 of 2 texts" in zero[0] and server.base_url in zero[0]


# -------------------------------------------------------------------------------------------- API keys


def _auth(server) -> list[str]:
    return [headers.get("authorization", "") for _, headers, _ in server.requests]


def test_environment_key_is_not_sent_to_another_server(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-from-env")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with FaultServer(lambda p, b: _embeddings(p, b) if p.endswith("/embeddings") else TEXT) as server:
        OpenAIEmbedder("m", base_url=server.base_url).embed_query("a")
        OpenAIChatModel("m", base_url=server.base_url).invoke("hi")
        OpenAIChatModel("m", base_url=server.base_url, api_key="sk-explicit").invoke("hi")
    assert _auth(server) == [f"Bearer {PLACEHOLDER_KEY}"] * 2 + ["Bearer sk-explicit"]


def test_environment_key_goes_with_its_own_base_url_and_to_openai(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-from-env")
    with FaultServer(lambda p, b: TEXT) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        OpenAIChatModel("m").invoke("hi")  # both from the environment: the pair the user configured
        OpenAIChatModel("m", base_url=server.base_url + "/").invoke("hi")
    assert _auth(server) == ["Bearer sk-secret-from-env"] * 2
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert resolve_endpoint(None, None) == ("https://api.openai.com/v1", "sk-secret-from-env")
    assert resolve_endpoint("https://api.openai.com/v1/", None)[1] == "sk-secret-from-env"
    for elsewhere in ("http://api.openai.com/v1", "https://api.openai.com.evil.example/v1", "https://x.example/v1"):
        assert resolve_endpoint(elsewhere, None)[1] == PLACEHOLDER_KEY


def test_cli_does_not_send_the_environment_key_to_a_local_server(book, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-from-env")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with FaultServer(_embeddings) as server:
        assert _retrieve(book, server) == 0
        assert main(["retrieve", str(book), "q", "--no-cache", "--quiet", "--embed-model", "m", "--embed-base-url",
                     server.base_url, "--embed-api-key", "sk-given"]) == 0  # fmt: skip
    keys = set(_auth(server))
    assert keys == {f"Bearer {PLACEHOLDER_KEY}", "Bearer sk-given"}


@pytest.mark.parametrize("kind", ["chat", "embedder"])
def test_a_slow_name_lookup_ends_within_the_deadline_and_says_so(kind, monkeypatch):
    """A 10 s DNS lookup (a sleeping resolver, no network) under timeout=1: the call ends within about the
    deadline and the error names the name resolution, not the server."""
    import socket
    import threading

    release = threading.Event()
    looked_up = []

    def slow_getaddrinfo(host, *args, **kwargs):
        looked_up.append(host)
        release.wait(10)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", slow_getaddrinfo)
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    url = "http://slow-dns.example.invalid:8080/v1"
    if kind == "chat":
        model = OpenAIChatModel("m", base_url=url, timeout=1)
        call = lambda: model.invoke("hi")  # noqa: E731
    else:
        emb = OpenAIEmbedder("m", base_url=url, timeout=1)
        call = lambda: emb.embed_query("hi")  # noqa: E731
    start = time.monotonic()
    try:
        with pytest.raises(TimeoutError, match=r"name resolution of 'slow-dns\.example\.invalid'.*timed out"):
            call()
        assert time.monotonic() - start < 2.5
        assert looked_up and looked_up[0] == "slow-dns.example.invalid"
    finally:
        release.set()
