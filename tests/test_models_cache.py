"""The persistent SQLite response cache and the caching wrapper (hits, misses, keys, persistence, threads)."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from fragrel_integrations.models import response_cache as cache_mod
from fragrel_integrations.models.chat import abatch
from fragrel_integrations.models.response_cache import CachedChatModel, ResponseCache, cache_key
from fragrel_integrations.testing import ScriptedChatModel


def test_all_is_pinned():
    assert sorted(cache_mod.__all__) == ["CachedChatModel", "ResponseCache", "cache_key"]


def test_key_depends_on_everything_that_changes_the_answer():
    base = cache_key("m", "hi", temperature=0.0, max_tokens=5, stop=["\n"])
    assert base == cache_key("m", [{"role": "user", "content": "hi"}], temperature=0, max_tokens=5, stop="\n")
    others = [
        cache_key("m2", "hi", temperature=0.0, max_tokens=5, stop=["\n"]),
        cache_key("m", "hi!", temperature=0.0, max_tokens=5, stop=["\n"]),
        cache_key("m", [{"role": "system", "content": "hi"}], temperature=0.0, max_tokens=5, stop=["\n"]),
        cache_key("m", "hi", temperature=0.5, max_tokens=5, stop=["\n"]),
        cache_key("m", "hi", temperature=0.0, max_tokens=6, stop=["\n"]),
        cache_key("m", "hi", temperature=0.0, max_tokens=5, stop=None),
        cache_key("m", "hi", temperature=0.0, max_tokens=5, stop=["\n"], namespace="run2"),
    ]
    assert len({base, *others}) == len(others) + 1


def test_hit_and_miss_counts_and_no_second_call():
    inner = ScriptedChatModel(["a", "b", "c"])
    model = CachedChatModel(inner, ":memory:")
    assert model.invoke("x", max_tokens=4) == "a"
    assert model.invoke("x", max_tokens=4) == "a"  # hit: the inner model is not called
    assert model.invoke("y", max_tokens=4) == "b"
    assert model.invoke("x", max_tokens=8) == "c"  # other params: miss
    assert (model.hits, model.misses, len(inner.calls), len(model.cache)) == (1, 3, 3, 3)


def test_persists_across_instances(tmp_path):
    path = tmp_path / "sub" / "cache.sqlite"
    first = CachedChatModel(ScriptedChatModel(["stored"], model_name="m"), path)
    assert first.invoke("q") == "stored"
    first.cache.close()
    again = ScriptedChatModel([], model_name="m")  # would raise if called
    second = CachedChatModel(again, path)
    assert second.invoke("q") == "stored" and again.calls == []
    other_model = CachedChatModel(ScriptedChatModel(["fresh"], model_name="other"), path)
    assert other_model.invoke("q") == "fresh"  # keyed by model
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT model, request, response FROM responses ORDER BY model").fetchall()
    assert [r[0] for r in rows] == ["m", "other"] and '"content": "q"' in rows[0][1]


async def test_async_path_uses_the_cache():
    inner = ScriptedChatModel(lambda m: m[-1]["content"] + "!")
    model = CachedChatModel(inner, ":memory:")
    out = await abatch(model, ["a", "b", "a"], max_concurrency=1)
    assert out == ["a!", "b!", "a!"]
    assert (model.hits, model.misses, len(inner.calls)) == (1, 2, 2)


def test_errors_are_not_cached():
    inner = ScriptedChatModel([RuntimeError("down"), "ok"])
    model = CachedChatModel(inner, ":memory:")
    with pytest.raises(RuntimeError):
        model.invoke("q")
    assert model.invoke("q") == "ok" and len(model.cache) == 1


def test_thread_safe_under_concurrent_use(tmp_path):
    model = CachedChatModel(ScriptedChatModel(lambda m: m[-1]["content"].upper()), tmp_path / "c.sqlite")
    errors = []

    def work(i):
        try:
            for j in range(20):
                assert model.invoke(f"q{j % 5}") == f"Q{j % 5}"
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(model.cache) == 5 and model.hits + model.misses == 80


def test_cache_object_api(tmp_path):
    with ResponseCache(tmp_path / "c.sqlite") as c:
        assert c.get("k") is None
        c.put("k", "v", model="m", request={"a": 1})
        assert c.get("k") == "v" and len(c) == 1
        c.clear()
        assert len(c) == 0
        with pytest.raises(TypeError):
            c.put("k", 3)


def test_wrapper_forwards_context_window_and_counting():
    inner = ScriptedChatModel(["x"], context_window=1234)
    model = CachedChatModel(inner, ":memory:")
    assert model.context_window == 1234
    assert model.count_tokens("hello world") == inner.count_tokens("hello world")
    assert model.model_name == "scripted"
