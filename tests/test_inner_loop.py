"""The framework-free ILM-TR inner loop: LCS helper by hand, convergence, limits, errors, async, dedupe."""

from __future__ import annotations

import asyncio
import json
from functools import cache

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fragrel_integrations import Fragment, FragRelIndex, ScoredFragment
from fragrel_integrations.core import inner_loop as il
from fragrel_integrations.core.inner_loop import (
    InnerLoopEngine,
    InnerLoopError,
    InnerLoopResult,
    join_query,
    lcs_length,
    lcs_similarity,
    lcs_tokens,
)
from fragrel_integrations.models.chat import ChatModelBase
from fragrel_integrations.models.tokens import estimate_tokens
from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel

# An original bAbI-style story.
STORY = [
    "Mary went to the kitchen.",
    "Mary picked up the apple.",
    "John travelled to the office.",
    "Mary walked to the garden.",
    "John grabbed the milk.",
]
QUESTION = "Where is the apple?"


def fixed(texts):
    """A retriever that returns the same texts for every query and records the queries."""
    queries: list[str] = []

    def retrieve(query: str) -> list[str]:
        queries.append(query)
        return list(texts)

    retrieve.queries = queries  # type: ignore[attr-defined]
    return retrieve


def counting_model(prefix: str = "memory") -> ScriptedChatModel:
    """A model whose every reply is different (never converges)."""
    rooms = ["kitchen", "garden", "office", "hallway", "bedroom", "cellar"]
    counter = iter(range(1000))

    def reply(messages):
        i = next(counter)
        return f"{prefix} number {i}: {rooms[i % len(rooms)]}"  # LCS with the previous reply: 2 of 4 tokens

    return ScriptedChatModel(reply)


def user_message(call: dict) -> str:
    return call["messages"][-1]["content"]


# ------------------------------------------------------------------------------------------------ LCS by hand


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("ABCBDAB", "BDCABA", 4),  # the textbook example: BCBA
        ("abc", "abc", 3),
        ("abc", "", 0),
        ("", "", 0),
        ("abc", "xyz", 0),
        ("axbycz", "abc", 3),
        (["the", "apple", "is", "here"], ["the", "apple", "was", "here"], 3),
        ("aaaa", "aa", 2),
    ],
)
def test_lcs_length_by_hand(a, b, expected):
    assert lcs_length(a, b) == expected
    assert lcs_length(b, a) == expected


def test_lcs_similarity_by_hand():
    # 6 tokens each, 5 in common (only "garden" / "kitchen" differ): 5 / 6
    assert lcs_similarity("the apple is in the garden", "the apple is in the kitchen") == pytest.approx(5 / 6)
    # 2 of the longer side's 4 tokens: 2 / 4
    assert lcs_similarity("apple garden", "the apple in garden") == pytest.approx(0.5)
    # case and punctuation are ignored
    assert lcs_similarity("The apple is in the Garden.", "the apple is in the garden") == 1.0
    # order matters: the LCS of (a b c) and (c b a) is 1 token
    assert lcs_similarity("a b c", "c b a") == pytest.approx(1 / 3)
    assert lcs_similarity("", "") == 1.0
    assert lcs_similarity("", "apple") == 0.0
    assert lcs_similarity("...", "!!!") == 1.0  # no tokens on either side


def test_lcs_tokens():
    assert lcs_tokens("Mary's apple, 2 pears!") == ["mary", "s", "apple", "2", "pears"]
    with pytest.raises(TypeError):
        lcs_tokens(None)  # type: ignore[arg-type]


@cache
def _reference_lcs(a: tuple, b: tuple) -> int:
    if not a or not b:
        return 0
    if a[0] == b[0]:
        return 1 + _reference_lcs(a[1:], b[1:])
    return max(_reference_lcs(a[1:], b), _reference_lcs(a, b[1:]))


@given(st.lists(st.sampled_from("abc"), max_size=8), st.lists(st.sampled_from("abc"), max_size=8))
def test_lcs_length_matches_the_recursive_definition(a, b):
    n = lcs_length(a, b)
    assert n == _reference_lcs(tuple(a), tuple(b))
    assert n <= min(len(a), len(b))


def test_join_query():
    assert join_query("Q?", "") == "Q?"
    assert join_query("Q?", "  ") == "Q?"
    assert join_query("Q?", "m.") == "Q?\nm."
    assert join_query("Q?", " m. ", " | ") == "Q? | m."


# ------------------------------------------------------------------------------------------------ the loop


def test_converges_when_consecutive_memories_agree():
    retriever = fixed(STORY)
    model = ScriptedChatModel(["Mary has the apple in the garden.", "Mary has the apple in the garden."])
    result = InnerLoopEngine(retriever, model).run(QUESTION)
    assert result.answer == "Mary has the apple in the garden."
    assert (result.converged, result.stop_reason, len(result.rounds)) == (True, "converged", 2)
    first, second = result.rounds
    assert first.similarity is None and second.similarity == 1.0
    assert first.query == QUESTION
    assert second.query == QUESTION + "\nMary has the apple in the garden."
    assert retriever.queries == [first.query, second.query]
    # the model saw the question, its memory and the numbered passages
    prompt1, prompt2 = user_message(model.calls[0]), user_message(model.calls[1])
    assert QUESTION in prompt1 and "Your memory so far: (empty)" in prompt1
    assert "[1] Mary went to the kitchen." in prompt1 and "[5] John grabbed the milk." in prompt1
    assert "Your memory so far: Mary has the apple in the garden." in prompt2
    assert model.calls[0]["messages"][0]["role"] == "system"
    assert model.calls[0]["max_tokens"] == 256 and model.calls[0]["temperature"] == 0.0


def test_threshold_decides_convergence():
    replies = ["the apple is in the garden now", "the apple is in the garden"]  # LCS 6 / 7
    loose = InnerLoopEngine(fixed(STORY), ScriptedChatModel(replies), threshold=0.85).run(QUESTION)
    assert loose.converged and loose.rounds[1].similarity == pytest.approx(6 / 7)
    strict = InnerLoopEngine(fixed(STORY), ScriptedChatModel(replies), threshold=0.9, max_loops=2).run(QUESTION)
    assert not strict.converged and strict.stop_reason == "max_loops"
    assert strict.answer == "the apple is in the garden"


def test_loop_limit():
    model = counting_model()
    result = InnerLoopEngine(fixed(STORY), model, max_loops=3).run(QUESTION)
    assert (len(result.rounds), result.converged, result.stop_reason) == (3, False, "max_loops")
    assert len(model.calls) == 3
    assert [r.index for r in result.rounds] == [1, 2, 3]
    assert result.answer == result.rounds[-1].stm
    assert all(r.similarity is not None and r.similarity < 0.9 for r in result.rounds[1:])


def test_default_loop_limit_is_five():
    result = InnerLoopEngine(fixed(STORY), counting_model()).run(QUESTION)
    assert len(result.rounds) == 5 and result.stop_reason == "max_loops"


def test_single_loop():
    result = InnerLoopEngine(fixed(STORY), ScriptedChatModel(["In the garden."]), max_loops=1).run(QUESTION)
    assert (result.answer, result.stop_reason, result.converged) == ("In the garden.", "max_loops", False)


def test_an_answer_the_shown_fragments_do_not_support_is_marked_when_printed():
    supported = InnerLoopEngine(fixed(STORY), ScriptedChatModel(["The garden."]), max_loops=1).run(QUESTION)
    assert supported.supported and supported.format() == "The garden." and supported.to_dict()["supported"]
    # not the words of a shown sentence ("Mary walked to the garden."): marked (was: supported)
    restated = InnerLoopEngine(fixed(STORY), ScriptedChatModel(["In the garden."]), max_loops=1).run(QUESTION)
    assert not restated.supported and restated.format().startswith("Not supported")
    guess = InnerLoopEngine(fixed(STORY), ScriptedChatModel(["On the Moon with Zed."]), max_loops=1).run(QUESTION)
    assert not guess.supported and guess.answer == "On the Moon with Zed."
    assert guess.format() == "Not supported by the retrieved text (the model's answer): On the Moon with Zed."
    empty = InnerLoopEngine(fixed(STORY), ScriptedChatModel(["  "]), max_loops=1).run(QUESTION)
    assert empty.format() == "The retrieved text does not state an answer to this question."


def test_empty_retrieval():
    model = ScriptedChatModel(["Unknown: nothing was found about the apple."], cycle=True)
    result = InnerLoopEngine(fixed([]), model).run(QUESTION)
    assert result.converged and result.rounds[0].retrieved == () and result.rounds[0].shown == ()
    assert "(no passages were retrieved)" in user_message(model.calls[0])
    assert result.fragments == []


def test_empty_reply_in_the_first_round():
    result = InnerLoopEngine(fixed(STORY), ScriptedChatModel(["  \n "])).run(QUESTION)
    assert (result.answer, result.stop_reason, result.converged) == ("", "empty_reply", False)
    assert len(result.rounds) == 1 and result.rounds[0].stm == "" and result.rounds[0].similarity is None


def test_empty_reply_keeps_the_previous_memory():
    model = ScriptedChatModel(["Mary has the apple.", ""])
    result = InnerLoopEngine(fixed(STORY), model).run(QUESTION)
    assert (result.answer, result.stop_reason, len(result.rounds)) == ("Mary has the apple.", "empty_reply", 2)
    assert result.rounds[1].reply == "" and result.rounds[1].stm == "Mary has the apple."
    assert result.rounds[1].similarity is None


def test_reply_label_is_stripped_and_memory_is_cut_to_max_stm_tokens():
    long_reply = "Updated memory: " + " ".join(f"word{i}" for i in range(100))
    model = ScriptedChatModel([long_reply])
    result = InnerLoopEngine(fixed(STORY), model, max_stm_tokens=12, max_loops=1).run(QUESTION)
    assert model.calls[0]["max_tokens"] == 12
    assert result.answer.startswith("word0") and estimate_tokens(result.answer) <= 12
    assert result.rounds[0].reply.startswith("Updated memory:")


def test_model_error_mid_loop_keeps_the_trace():
    model = ScriptedChatModel(["Mary has the apple.", ConnectionError("server went away")])
    with pytest.raises(InnerLoopError) as info:
        InnerLoopEngine(fixed(STORY), model).run(QUESTION)
    err = info.value
    assert isinstance(err, RuntimeError)
    assert err.stage == "model" and isinstance(err.__cause__, ConnectionError)
    assert "round 2" in str(err) and "server went away" in str(err)
    assert err.result.stop_reason == "error" and not err.result.converged
    assert err.result.answer == "Mary has the apple." and len(err.result.rounds) == 1
    assert err.result.rounds[0].retrieved[0].text == STORY[0]


def test_retriever_error_mid_loop_keeps_the_trace():
    calls = iter(range(10))

    def flaky(query: str) -> list[str]:
        if next(calls) == 1:
            raise OSError("index offline")
        return STORY

    with pytest.raises(InnerLoopError) as info:
        InnerLoopEngine(flaky, counting_model()).run(QUESTION)
    assert info.value.stage == "retriever" and isinstance(info.value.__cause__, OSError)
    assert len(info.value.result.rounds) == 1


def test_stream_yields_one_snapshot_per_round():
    snapshots = list(InnerLoopEngine(fixed(STORY), counting_model(), max_loops=3).stream(QUESTION))
    assert [len(s.rounds) for s in snapshots] == [1, 2, 3]
    assert [s.stop_reason for s in snapshots] == [None, None, "max_loops"]
    assert [s.done for s in snapshots] == [False, False, True]
    assert all(isinstance(s, InnerLoopResult) for s in snapshots)


def test_dedupe_shows_each_fragment_once():
    rounds = [STORY[:2], [*STORY[:2], STORY[3]], [*STORY[:2], STORY[0]]]
    it = iter(rounds)

    def retriever(query: str) -> list[str]:
        return next(it)

    model = counting_model()
    result = InnerLoopEngine(retriever, model, max_loops=3, dedupe=True).run(QUESTION)
    shown = [[h.text for h in r.shown] for r in result.rounds]
    assert shown == [STORY[:2], [STORY[3]], []]
    assert [len(r.retrieved) for r in result.rounds] == [2, 3, 3]
    assert "[1] Mary walked to the garden." in user_message(model.calls[1])
    assert "Mary went to the kitchen." not in user_message(model.calls[1])
    assert "(no new passages" in user_message(model.calls[2])
    assert [h.text for h in result.fragments] == [STORY[0], STORY[1], STORY[3]]


def test_without_dedupe_everything_is_shown_again():
    result = InnerLoopEngine(fixed(STORY[:2]), counting_model(), max_loops=2).run(QUESTION)
    assert [len(r.shown) for r in result.rounds] == [2, 2]
    assert len(result.fragments) == 2


def test_context_budget_drops_the_passages_that_do_not_fit():
    texts = [f"passage {i} " + "filler " * 10 for i in range(6)]
    model = ScriptedChatModel(["m"], cycle=True)
    result = InnerLoopEngine(fixed(texts), model, context_tokens=40, max_loops=1).run(QUESTION)
    shown = [h.text for h in result.rounds[0].shown]
    assert 0 < len(shown) < 6 and shown == texts[: len(shown)]
    assert "passage 5" not in user_message(model.calls[0])
    # a small context window bounds the passages the same way
    small = ScriptedChatModel(["m"], cycle=True, context_window=900)
    result = InnerLoopEngine(fixed(texts * 10), small, max_loops=1).run(QUESTION)
    assert 0 < len(result.rounds[0].shown) < 60


def test_accepts_fragments_scored_fragments_and_an_index():
    frag = Fragment("Mary dropped the apple.", doc_id="story", position=7)
    scored = ScoredFragment(Fragment("John left.", "story", 8), 0.9, 0.8, 0.2)
    result = InnerLoopEngine(lambda q: [frag, scored], ScriptedChatModel(["a"], cycle=True)).run(QUESTION)
    assert [h.fragment.position for h in result.rounds[0].retrieved] == [7, 8]
    assert result.rounds[0].retrieved[1].score == 0.9
    index = FragRelIndex.from_fragments(STORY, embedder=HashingEmbedder(dim=64), show_progress=False)
    result = InnerLoopEngine(index, ScriptedChatModel(["a"], cycle=True)).run(QUESTION)
    assert len(result.rounds[0].retrieved) == 5
    assert result.rounds[0].retrieved[0].text == "Mary picked up the apple."


def test_trace_is_json_serialisable():
    result = InnerLoopEngine(fixed(STORY[:2]), ScriptedChatModel(["a b", "a b"]), dedupe=True).run(QUESTION)
    trace = json.loads(json.dumps(result.to_dict()))
    assert trace["answer"] == "a b" and trace["stop_reason"] == "converged"
    assert [r["index"] for r in trace["rounds"]] == [1, 2]
    assert [x["shown"] for x in trace["rounds"][1]["retrieved"]] == [False, False]
    assert trace["rounds"][0]["retrieved"][0] == {
        "text": STORY[0],
        "doc_id": "0",
        "position": 0,
        "score": 0.0,
        "shown": True,
    }


def test_custom_prompts_and_separator():
    model = ScriptedChatModel(["x"], cycle=True)
    engine = InnerLoopEngine(
        fixed(STORY[:1]),
        model,
        system_prompt=None,
        prompt_template="Q={question} M={memory} C={context}",
        query_separator=" || ",
    )
    result = engine.run(QUESTION)
    assert model.calls[0]["messages"] == [
        {"role": "user", "content": "Q=Where is the apple? M=(empty) C=[1] Mary went to the kitchen."}
    ]
    assert result.rounds[1].query == "Where is the apple? || x"


def test_with_settings_and_with_retriever_copy_the_engine():
    engine = InnerLoopEngine(fixed(STORY), ScriptedChatModel(["a"], cycle=True), max_loops=4)
    other = engine.with_settings(dedupe=True, threshold=1.0)
    assert (other.max_loops, other.dedupe, other.threshold) == (4, True, 1.0) and not engine.dedupe
    moved = engine.with_retriever(fixed(["elsewhere"]))
    assert moved.run(QUESTION).rounds[0].retrieved[0].text == "elsewhere"
    with pytest.raises(TypeError, match="unknown settings"):
        engine.with_settings(loops=3)


# ------------------------------------------------------------------------------------------------ async


class AsyncOnlyModel(ChatModelBase):
    """Fails if called synchronously: proves the async path uses ainvoke."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = iter(replies)

    def _generate(self, messages, temperature, max_tokens, stop):
        raise AssertionError("the async path must not call invoke")

    async def _agenerate(self, messages, temperature, max_tokens, stop):
        await asyncio.sleep(0)
        return next(self.replies)


async def test_arun_uses_ainvoke_and_the_async_retriever():
    sync_calls: list[str] = []
    async_calls: list[str] = []

    def retrieve(query: str) -> list[str]:
        sync_calls.append(query)
        return STORY

    async def aretrieve(query: str) -> list[str]:
        async_calls.append(query)
        await asyncio.sleep(0)
        return STORY

    model = AsyncOnlyModel(["Mary has the apple.", "Mary has the apple."])
    result = await InnerLoopEngine(retrieve, model, aretriever=aretrieve).arun(QUESTION)
    assert result.converged and result.answer == "Mary has the apple."
    assert sync_calls == [] and async_calls == [QUESTION, QUESTION + "\nMary has the apple."]


async def test_async_function_as_the_retriever():
    async def aretrieve(query: str) -> list[str]:
        return STORY

    engine = InnerLoopEngine(aretrieve, ScriptedChatModel(["a", "a"]))
    result = await engine.arun(QUESTION)
    assert result.converged
    with pytest.raises(TypeError, match="only an async retriever"):
        engine.run(QUESTION)


async def test_arun_with_a_sync_retriever_and_astream():
    engine = InnerLoopEngine(fixed(STORY), counting_model(), max_loops=2)
    snapshots = [s async for s in engine.astream(QUESTION)]
    assert [s.stop_reason for s in snapshots] == [None, "max_loops"]
    result = await InnerLoopEngine(fixed(STORY), ScriptedChatModel(["a", "a"])).arun(QUESTION)
    assert result.stop_reason == "converged"


async def test_async_model_error_keeps_the_trace():
    model = ScriptedChatModel(["Mary has the apple.", TimeoutError("slow")])
    with pytest.raises(InnerLoopError) as info:
        await InnerLoopEngine(fixed(STORY), model).arun(QUESTION)
    assert len(info.value.result.rounds) == 1 and isinstance(info.value.__cause__, TimeoutError)


def test_sync_retriever_returning_a_coroutine_is_rejected():
    class Sneaky:
        def __call__(self, query):
            async def inner():
                return STORY

            return inner()

    with pytest.raises(TypeError, match="aretriever"):
        InnerLoopEngine(Sneaky(), ScriptedChatModel(["a"])).run(QUESTION)


# ------------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("max_loops", [0, -1, 2.5, True, "5"])
def test_bad_max_loops(max_loops):
    with pytest.raises(ValueError, match="max_loops must be an int >= 1"):
        InnerLoopEngine(fixed(STORY), ScriptedChatModel(["a"]), max_loops=max_loops)


@pytest.mark.parametrize("threshold", [0, -0.1, 1.01, float("nan"), True, "0.9"])
def test_bad_threshold(threshold):
    with pytest.raises(ValueError, match=r"threshold must be a number in \(0, 1\]"):
        InnerLoopEngine(fixed(STORY), ScriptedChatModel(["a"]), threshold=threshold)


def test_threshold_one_is_allowed():
    assert InnerLoopEngine(fixed(STORY), ScriptedChatModel(["a"]), threshold=1).threshold == 1.0


@pytest.mark.parametrize("question", ["", "   \n"])
def test_empty_question(question):
    engine = InnerLoopEngine(fixed(STORY), ScriptedChatModel(["a"]))
    with pytest.raises(ValueError, match=r"question is (empty|blank)"):
        engine.run(question)


async def test_empty_question_async():
    with pytest.raises(ValueError, match=r"question is (empty|blank)"):
        await InnerLoopEngine(fixed(STORY), ScriptedChatModel(["a"])).arun("")


def test_bad_arguments():
    model = ScriptedChatModel(["a"])
    with pytest.raises(TypeError, match="question must be str"):
        InnerLoopEngine(fixed(STORY), model).run(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="retriever must be a function"):
        InnerLoopEngine(42, model)
    with pytest.raises(TypeError, match="cannot use"):
        InnerLoopEngine(fixed(STORY), object())
    with pytest.raises(ValueError, match="max_stm_tokens"):
        InnerLoopEngine(fixed(STORY), model, max_stm_tokens=0)
    with pytest.raises(ValueError, match="context_tokens"):
        InnerLoopEngine(fixed(STORY), model, context_tokens=0)
    with pytest.raises(TypeError, match="dedupe"):
        InnerLoopEngine(fixed(STORY), model, dedupe="yes")
    with pytest.raises(ValueError, match=r"\{question\}, \{memory\} and \{context\}"):
        InnerLoopEngine(fixed(STORY), model, prompt_template="{question} {context}")
    with pytest.raises(ValueError, match="literal braces"):
        InnerLoopEngine(fixed(STORY), model, prompt_template="{question} {memory} {context} {")
    with pytest.raises(ValueError, match="temperature"):
        InnerLoopEngine(fixed(STORY), model, temperature=5)
    with pytest.raises(TypeError, match="no retriever"):
        InnerLoopEngine(None, model).run(QUESTION)


@pytest.mark.parametrize("bad", ["a string", {"a": 1}, [1, 2], None])
def test_bad_retriever_results(bad):
    with pytest.raises(TypeError, match=r"the retriever (must return|returned)"):
        InnerLoopEngine(lambda q: bad, ScriptedChatModel(["a"])).run(QUESTION)


def test_public_names():
    assert set(il.__all__) == {
        "DEFAULT_PROMPT_TEMPLATE",
        "DEFAULT_SYSTEM_PROMPT",
        "InnerLoopEngine",
        "InnerLoopError",
        "InnerLoopResult",
        "InnerLoopRound",
        "RetrievedItem",
        "StopReason",
        "fragment_key",
        "join_query",
        "lcs_length",
        "lcs_similarity",
        "lcs_tokens",
    }
    for name in il.__all__:
        assert hasattr(il, name)
    for field in ("{question}", "{memory}", "{context}"):
        assert field in il.DEFAULT_PROMPT_TEMPLATE


# ------------------------------------------------------------------------------------------ adapter helpers


def test_scored_from_metadata_reads_fragrel_sub_scores_and_ignores_non_numbers():
    from fragrel_integrations.adapters import loop_runs as il  # the adapter helpers live in the kit
    from fragrel_integrations.adapters.wrapper_settings import ENVIRONMENT_SCORE_KEY, INDEPENDENT_SCORE_KEY

    fragment = Fragment("Mary went to the garden.", "story", 3)
    hit = il.scored_from_metadata(fragment, 0.7, {INDEPENDENT_SCORE_KEY: 0.5, ENVIRONMENT_SCORE_KEY: 0.25})
    assert (hit.fragment, hit.score, hit.independent_score, hit.environment_score) == (fragment, 0.7, 0.5, 0.25)
    plain = il.scored_from_metadata(fragment, 0.7, {INDEPENDENT_SCORE_KEY: True, ENVIRONMENT_SCORE_KEY: "high"})
    assert (plain.independent_score, plain.environment_score) == (
        0.7,
        0.0,
    )  # a bool or a string is not a score: the defaults


def test_engine_for_adapter_applies_settings_and_names_the_adapters_arguments():
    from fragrel_integrations.adapters import loop_runs as il  # the adapter helpers live in the kit

    model = ScriptedChatModel(["a"])
    hints = {"model_arg": "llm", "model_hint": "an LLM", "retriever_hint": "a retriever"}
    settings = {"max_loops": 2, "threshold": None}
    built = il.engine_for_adapter(None, model, settings, has_retriever=True, **hints)
    assert built.max_loops == 2 and built.threshold == 0.9  # None means "the engine's default"
    base = InnerLoopEngine(lambda q: [], model, max_loops=4, dedupe=True)
    changed = il.engine_for_adapter(base, None, settings, has_retriever=False, **hints)
    assert (changed.max_loops, changed.dedupe, changed.has_sync_retriever) == (2, True, True)
    assert il.engine_for_adapter(base, None, {"max_loops": None}, has_retriever=False, **hints) is base
    with pytest.raises(ValueError, match="llm is required: pass an LLM"):
        il.engine_for_adapter(None, None, settings, has_retriever=True, **hints)
    with pytest.raises(ValueError, match="retriever is required: pass a retriever"):
        il.engine_for_adapter(None, model, settings, has_retriever=False, **hints)
    with pytest.raises(ValueError, match=r"engine=\.\.\. or llm=\.\.\., not both"):
        il.engine_for_adapter(base, model, settings, has_retriever=True, **hints)
    with pytest.raises(ValueError, match="engine has no retriever"):
        il.engine_for_adapter(InnerLoopEngine(None, model), None, settings, has_retriever=False, **hints)
    with pytest.raises(TypeError, match="engine must be an InnerLoopEngine"):
        il.engine_for_adapter("engine", None, settings, has_retriever=True, **hints)
