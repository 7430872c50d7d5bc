"""SCM memory core: controller parsing and fallbacks, the per-turn workflow (activation, flash memory, top-k in
time order, summary substitution under the budget), FragRel relation scores, SQLite persistence across
processes, session isolation, sync/async parity."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from fragrel_integrations.core import scm
from fragrel_integrations.core.fragments import Fragment
from fragrel_integrations.core.relation_aware import relation_aware_scores
from fragrel_integrations.core.relations import ContextRelation, FragmentLayout, context_weights
from fragrel_integrations.core.scm import (
    DECISION_MAX_TOKENS,
    PAPER_ITEM_TOKENS,
    PAPER_TOTAL_TOKENS,
    Decision,
    MemoryItem,
    SCMController,
    SCMStream,
    SelfControlledMemory,
    parse_yes_no,
)
from fragrel_integrations.core.scorers import BM25Scorer, minmax
from fragrel_integrations.core.token_budget import OUTPUT_CHARS_PER_TOKEN
from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel


def kind(messages) -> str:
    """Which controller request a message list is."""
    text = messages[-1]["content"]
    if "need memory of earlier turns" in text:
        return "activation"
    if "Is the summary enough" in text:
        return "sufficiency"
    if "Summarise this turn" in text:
        return "summary"
    return "response"


class FakeController(ScriptedChatModel):
    """A scripted controller: fixed answers per request kind; a summary is 'Summary: ' + the user's first 6 words
    (the controller strips the 'Summary:' label)."""

    def __init__(self, activation: str = "yes", sufficiency: str = "yes", response: str = "OK.") -> None:
        self.answers = {"activation": activation, "sufficiency": sufficiency, "response": response}
        super().__init__(self.respond)

    def respond(self, messages) -> str:
        k = kind(messages)
        if k == "summary":
            user = next(line for line in messages[-1]["content"].splitlines() if line.startswith("User: "))
            return "Summary: " + " ".join(user[6:].split()[:6])
        return self.answers[k]

    def kinds(self) -> list[str]:
        return [kind(c["messages"]) for c in self.calls]


TURNS = [
    ("My cat is called Miso and she is grey.", "Miso is a lovely name."),
    ("I work as a nurse in Lisbon.", "Nursing is demanding work."),
    ("My favourite dessert is lemon tart.", "Lemon tart is delicious."),
    ("I am learning to play the cello.", "The cello has a warm sound."),
    ("We visited Porto last weekend.", "Porto is beautiful."),
]


def build(controller=None, *, turns=TURNS, session_id="ana", **kwargs) -> SelfControlledMemory:
    memory = SelfControlledMemory(controller or FakeController(), embedder=HashingEmbedder(dim=256), **kwargs)
    for observation, response in turns:
        memory.record(observation, response, session_id=session_id)
    return memory


def test_public_names_are_pinned():
    assert sorted(scm.__all__) == sorted(
        [
            "ACTIVATION_EXAMPLES",
            "ACTIVATION_MODES",
            "ACTIVATION_PROMPT",
            "ACTIVATION_SYSTEM_PROMPT",
            "DECISION_MAX_TOKENS",
            "DECISION_MODES",
            "DEFAULT_ACTIVATION_THRESHOLD",
            "DEFAULT_SIMILARITY_THRESHOLD",
            "DEFAULT_SUFFICIENCY_THRESHOLD",
            "EmbeddingGate",
            "LexicalGate",
            "MEMORY_CUES",
            "DEFAULT_SESSION",
            "DIALOGUE_W_REL",
            "FUSION_SYSTEM_PROMPT",
            "FUSION_TEMPLATE",
            "MEMORY_SYSTEM_TEMPLATE",
            "PAPER_ITEM_TOKENS",
            "PAPER_TOTAL_TOKENS",
            "SUFFICIENCY_PROMPT",
            "SUMMARY_PROMPT",
            "Decision",
            "InMemoryStreamIndex",
            "MemoryItem",
            "MemoryStream",
            "RecalledMemory",
            "SCMContext",
            "SCMController",
            "SCMIndexError",
            "SCMStream",
            "SCMTurn",
            "SelfControlledMemory",
            "StreamIndex",
            "parse_yes_no",
            "render_memory_block",
        ]
    )
    for name in scm.__all__:
        assert hasattr(scm, name)


# ------------------------------------------------------------------------------------------ controller


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("yes", True),
        ("Yes.", True),
        ("YES, the user refers to their cat.", True),
        ("  **Yes**", True),
        ('"yes"', True),
        ("Answer: yes", True),
        ("y", True),
        ("True", True),
        ("Memory is needed.", True),
        ("no", False),
        ("No.", False),
        ("NO - this is a greeting.", False),
        ("Answer: no", False),
        ("not needed", False),
        ("false", False),
        ("The summary is insufficient.", False),
        ("", None),
        ("   ", None),
        ("I cannot tell.", None),
        ("Either yes or no.", None),
        ("42", None),
    ],
)
def test_parse_yes_no_is_lenient(reply, expected):
    assert parse_yes_no(reply) is expected if expected is None else parse_yes_no(reply) == expected


def test_parse_yes_no_rejects_non_text():
    with pytest.raises(TypeError, match="must be str"):
        parse_yes_no(None)  # type: ignore[arg-type]


def test_controller_fallbacks_on_unparseable_answers():
    controller = SCMController(ScriptedChatModel(["hmm", "hmm", "No", "Yes"]))
    item = MemoryItem("s", 0, "long", "long", "short summary")
    assert controller.needs_memory("What did I say?") == Decision(True, "hmm", False)  # documented: use memory
    assert controller.summary_suffices("What did I say?", item) == Decision(True, "hmm", False)  # use the summary
    assert controller.needs_memory("Hi") == Decision(False, "No", True)
    assert controller.summary_suffices("Hi", item) == Decision(True, "Yes", True)

    strict = SCMController(ScriptedChatModel(["??", "??"]), activation_fallback=False, summary_fallback=False)
    assert strict.needs_memory("x").value is False
    assert strict.summary_suffices("x", item).value is False


def test_controller_prompts_and_validation():
    controller = SCMController(ScriptedChatModel(["Summary: Ana has a cat.", ""]))
    flash = MemoryItem("s", 3, "Hello", "Hi!")
    prompt = controller.activation_messages("Do you remember my cat?", flash)[0]["content"]
    assert "User: Hello\nAssistant: Hi!" in prompt and "Do you remember my cat?" in prompt
    assert "first turn" in controller.activation_messages("Hi", None)[0]["content"]
    assert controller.summarize("I have a cat.", "Nice.") == "Ana has a cat."
    assert controller.summarize("I have a cat.", "Nice.") == "User: I have a cat. Assistant: Nice."  # blank reply
    assert controller.model.calls[0]["max_tokens"] == controller.summary_max_tokens
    with pytest.raises(ValueError, match=r"\{observation\}"):
        SCMController(ScriptedChatModel([]), activation_prompt="{flash} only")
    with pytest.raises(TypeError, match="True or False"):
        SCMController(ScriptedChatModel([]), activation_fallback="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cannot use"):
        SCMController(object())


# ------------------------------------------------------------------------------------------ workflow


def test_activation_no_skips_long_term_memory_but_keeps_flash():
    controller = FakeController(activation="No.")
    memory = build(controller)
    context = memory.prepare("Hello again!", session_id="ana")
    assert context.activation == Decision(False, "No.", True) and not context.use_memory
    assert context.memories == ()
    assert context.flash is not None and context.flash.index == len(TURNS) - 1
    assert "Previous turn:\nUser: We visited Porto last weekend." in context.block
    assert "Earlier turns" not in context.block


def test_unparseable_activation_falls_back_to_recall():
    memory = build(FakeController(activation="Let me think about it"))
    context = memory.prepare("What is my cat called?", session_id="ana")
    assert context.activation is not None and context.activation.parsed is False and context.activation.value
    assert [m.item.index for m in context.memories][:1] == [0]


def test_top_k_excludes_flash_and_is_in_time_order():
    turns = [*TURNS, ("Tell me about cats: my cat Miso is grey.", "Grey cats are common.")]  # flash is about the cat
    memory = build(turns=turns, k=3)
    context = memory.prepare("Is my cat Miso grey?", session_id="ana")
    indices = [m.item.index for m in context.memories]
    assert len(indices) == 3 and indices == sorted(indices)
    assert 0 in indices and len(turns) - 1 not in indices  # the cat turn is recalled; the flash turn is not
    assert context.flash.index == len(turns) - 1
    best = max(context.memories, key=lambda m: m.score)
    assert best.item.index == 0
    block = context.block
    assert block.index("Earlier turns") < block.index("Previous turn:")  # activated memories, then flash
    assert block.index("[turn 0]") < block.index(f"[turn {indices[-1]}]")


def test_flash_memory_is_always_present():
    for controller, kwargs in [
        (FakeController(activation="yes"), {}),
        (FakeController(activation="no"), {}),
        (FakeController(activation="???"), {}),
        (FakeController(), {"activation": False}),
    ]:
        memory = build(controller, **kwargs)
        context = memory.prepare("Anything new?", session_id="ana")
        assert context.flash is not None and context.flash.observation == TURNS[-1][0]
        assert TURNS[-1][0] in memory.memory_prompt(context)
        assert TURNS[-1][0] in memory.fusion_messages(context)[-1]["content"]
    # with activation disabled the controller is never asked, memory is always recalled
    controller = FakeController()
    memory = build(controller, activation=False)
    context = memory.prepare("Anything new?", session_id="ana")
    assert context.activation is None and context.memories and "activation" not in controller.kinds()


def test_first_and_second_turn_need_no_controller_call():
    controller = FakeController()
    memory = SelfControlledMemory(controller, embedder=HashingEmbedder(dim=64))
    empty = memory.prepare("Hi!")
    assert empty.flash is None and empty.memories == () and empty.block == "" and empty.activation is None
    assert memory.memory_prompt(empty) == ""
    assert "(no earlier turns)" in memory.fusion_messages(empty)[-1]["content"]
    memory.record("Hi!", "Hello!")
    second = memory.prepare("How are you?")
    assert second.flash.observation == "Hi!" and second.memories == () and second.activation is None
    assert controller.kinds() == ["summary"]  # only the write-back summary so far


LONG = " ".join(["detail"] * 150)  # ~150 tokens by the estimate


def test_summary_substitution_under_the_budget():
    turns = [
        (f"Story about my garden: {LONG}", "Thanks for the garden story."),
        ("Short note about my garden.", "Noted."),
        (f"Another garden story: {LONG}", "What a garden."),
        ("Unrelated flash turn.", "Sure."),
    ]
    controller = FakeController(sufficiency="yes")
    memory = build(controller, turns=turns, k=3, item_tokens=100, total_tokens=200)
    context = memory.prepare("What grows in my garden?", session_id="ana")
    by_index = {m.item.index: m for m in context.memories}
    assert sorted(by_index) == [0, 1, 2]
    assert sum(m.tokens for m in context.memories) > 200
    assert by_index[0].use_summary and by_index[2].use_summary  # long ones: summary
    assert by_index[0].decision == Decision(True, "yes", True)
    assert not by_index[1].use_summary and by_index[1].decision is None  # short one: never asked
    assert controller.kinds().count("sufficiency") == 2
    assert by_index[0].shown == by_index[0].item.summary and LONG not in context.block
    assert "[turn 0, summary] Story about my garden: detail detail\n" in context.block

    # the controller says the summary is not enough -> the full texts stay, cut to fair shares of the budget
    memory = build(FakeController(sufficiency="no"), turns=turns, k=3, item_tokens=100, total_tokens=200)
    context = memory.prepare("What grows in my garden?", session_id="ana")
    assert not any(m.use_summary for m in context.memories) and LONG not in context.block
    assert "[turn 0] User: Story about my garden: detail detail" in context.block and "[...]" in context.block
    assert "[turn 1] User: Short note about my garden.\nAssistant: Noted." in context.block  # short: whole
    assert context.memories[0].item.observation == turns[0][0]  # the context keeps the stored turn
    # unparseable -> documented fallback: the summary (we are over budget)
    memory = build(FakeController(sufficiency="perhaps"), turns=turns, k=3, item_tokens=100, total_tokens=200)
    context = memory.prepare("What grows in my garden?", session_id="ana")
    assert [m.use_summary for m in context.memories] == [True, False, True]
    assert all(m.decision is None or not m.decision.parsed for m in context.memories)
    # under the total budget nothing is asked, even for long turns
    controller = FakeController()
    memory = build(controller, turns=turns, k=3, item_tokens=100, total_tokens=10_000)
    context = memory.prepare("What grows in my garden?", session_id="ana")
    assert "sufficiency" not in controller.kinds() and not any(m.use_summary for m in context.memories)


#: Labels the block adds around the texts it shows (headers, "[turn n]", "User:", "Assistant:"), in tokens.
BLOCK_LABEL_TOKENS = 60


@pytest.mark.parametrize(
    "huge",
    [
        "word " * 400_000,  # a 2 MB turn
        "x" * 2_000_000,  # one 2 MB token
        "\u6211\u4eec\u5728\u516c\u56ed\u91cc\u6563\u6b65" * 100_000,  # Chinese without a space
    ],
    ids=["words", "one-token", "chinese"],
)
def test_a_huge_previous_turn_is_cut_to_the_memory_budget(huge):
    """Issue 25: the flash turn sat outside total_tokens (after a 2 MB turn the next memory prompt was 2,000,167
    characters); now the whole block, and the flash turn in the activation question, fit the budget."""
    controller = FakeController()
    memory = build(controller, k=3)
    memory.record(huge, "Noted, a long message.", session_id="ana")
    context = memory.prepare("What is my cat called?", session_id="ana")
    assert context.flash.observation == huge  # the stored turn is untouched
    budget = memory.total_tokens
    assert memory.count_tokens(context.block) <= budget + BLOCK_LABEL_TOKENS
    assert len(memory.memory_prompt(context)) < OUTPUT_CHARS_PER_TOKEN * budget
    assert "Previous turn:\nUser: " + huge[:50] in context.block and "[...]\nAssistant: Noted, a long" in context.block
    assert "Miso" in context.block  # the short recalled turns are kept whole
    activation = [c["messages"] for c in controller.calls if kind(c["messages"]) == "activation"][-1]
    assert sum(len(m["content"]) for m in activation) < OUTPUT_CHARS_PER_TOKEN * budget
    standalone = memory.fusion_messages(context)
    assert sum(len(m["content"]) for m in standalone) < OUTPUT_CHARS_PER_TOKEN * budget + 1000


def test_the_flash_turn_counts_towards_reorganisation_and_recalled_full_texts_fit_the_budget():
    long_turn = (f"Garden diary: {LONG}", "ok")  # ~300 tokens
    turns = [long_turn, ("Short note.", "ok"), (f"Flash turn: {LONG} {LONG}", "ok")]  # flash ~600 tokens
    controller = FakeController(sufficiency="no")
    memory = build(controller, turns=turns, k=2, item_tokens=100, total_tokens=800)
    context = memory.prepare("What is in my garden diary?", session_id="ana")
    assert sum(m.tokens for m in context.memories) < 800  # the recalled turns alone are under the budget ...
    assert controller.kinds().count("sufficiency") == 1  # ... with the flash turn they are over: reorganised
    assert memory.count_tokens(context.block) <= 800 + BLOCK_LABEL_TOKENS
    # stored without summaries, a recalled 2 MB turn is cut too
    huge = [("words " * 300_000, "ok"), ("Short note.", "ok"), ("flash", "ok")]
    memory = build(FakeController(), turns=huge, k=2, summarize=False)
    context = memory.prepare("words?", session_id="ana")
    assert len(context.memories) == 2 and memory.count_tokens(context.block) <= 2000 + BLOCK_LABEL_TOKENS


def test_paper_thresholds_are_the_defaults():
    memory = SelfControlledMemory(FakeController(), embedder=HashingEmbedder(dim=8))
    assert (memory.item_tokens, memory.total_tokens) == (PAPER_ITEM_TOKENS, PAPER_TOTAL_TOKENS) == (800, 2000)
    assert memory.k == 5 and memory.alpha == 0.5 and memory.relation is None


def test_summarize_false_embeds_the_turn_and_never_substitutes():
    controller = FakeController()
    turns = [(f"Garden: {LONG}", "ok"), (f"Garden again: {LONG}", "ok"), ("flash", "ok")]
    memory = build(controller, turns=turns, summarize=False, item_tokens=10, total_tokens=10)
    assert all(item.summary == "" for item in memory.history("ana"))
    context = memory.prepare("my garden?", session_id="ana")
    assert len(context.memories) == 2 and not any(m.use_summary for m in context.memories)
    assert controller.kinds() == ["activation"]


def test_relation_scores_follow_fragrel_eq_9_10():
    memory = build(relation=ContextRelation(0.8), k=5)
    items = memory.history("ana")[:-1]
    embeddings = np.stack([it.embedding for it in items])
    query = HashingEmbedder(dim=256).embed_query("Tell me about my cat and Lisbon")
    cosine = embeddings.astype(np.float64) @ query / np.linalg.norm(embeddings, axis=1) / np.linalg.norm(query)
    layout = FragmentLayout.from_fragments([Fragment(it.summary, "ana", it.index) for it in items])
    expected = relation_aware_scores(cosine, context_weights(layout, 0.8), alpha=0.5)
    np.testing.assert_allclose(memory.scores(query, items, embeddings), expected, rtol=1e-6, atol=1e-9)
    plain = build(relation=ContextRelation(0.0))
    np.testing.assert_allclose(plain.scores(query, items, embeddings), cosine, rtol=1e-6, atol=1e-9)
    context = memory.prepare("Tell me about my cat and Lisbon", session_id="ana")
    assert [m.item.index for m in context.memories] == [0, 1, 2, 3]  # all candidates (k=5), time order


@pytest.mark.parametrize("scorer", ["bm25", "hybrid"])
def test_bm25_and_hybrid_scorers_match_the_core_scorers(scorer):
    memory = build(scorer=scorer, k=2)
    items = memory.history("ana")[:-1]
    embeddings = np.stack([it.embedding for it in items])
    observation = "Tell me about my cat"
    query = HashingEmbedder(dim=256).embed_query(observation)
    cosine = embeddings.astype(np.float64) @ query / np.linalg.norm(embeddings, axis=1) / np.linalg.norm(query)
    bm25 = BM25Scorer([it.summary or it.text for it in items])(observation)
    expected = bm25 if scorer == "bm25" else 0.5 * minmax(bm25) + 0.5 * minmax(cosine)
    np.testing.assert_allclose(memory.scores(query, items, embeddings, observation), expected, rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="needs the observation text"):
        memory.scores(query, items, embeddings)
    top = np.argsort(-expected, kind="stable")[:2]
    context = memory.prepare(observation, session_id="ana")
    assert [m.item.index for m in context.memories] == sorted(items[i].index for i in top)


def test_unknown_scorer_is_rejected():
    with pytest.raises(ValueError, match="scorer must be one of"):
        build(scorer="tfidf")


def test_chat_runs_the_whole_turn_and_writes_back():
    controller = FakeController()
    responder = ScriptedChatModel(["Your cat is Miso.", "You live in Lisbon."])
    memory = build(controller)
    turn = memory.chat("What is my cat called?", session_id="ana", model=responder)
    assert turn.response == "Your cat is Miso." and turn.item.index == len(TURNS)
    sent = responder.calls[0]["messages"]
    assert sent[0]["role"] == "system" and "What is my cat called?" in sent[-1]["content"]
    assert "[turn 0] User: My cat is called Miso" in sent[-1]["content"]
    assert TURNS[-1][0] in sent[-1]["content"]  # flash
    stored = memory.history("ana")[-1]
    assert (stored.observation, stored.response) == ("What is my cat called?", "Your cat is Miso.")
    assert stored.summary == "What is my cat called?" and stored.embedding.shape == (256,)
    nxt = memory.chat("Where do I live?", session_id="ana", model=responder)
    assert nxt.context.flash.index == turn.item.index  # the previous turn is the next flash memory


def test_async_matches_sync():
    sync_memory = build(FakeController(response="Sure."))
    async_memory = build(FakeController(response="Sure."))
    sync_turn = sync_memory.chat("What is my cat called?", session_id="ana")

    async def run():
        return await async_memory.achat("What is my cat called?", session_id="ana")

    async_turn = asyncio.run(run())
    assert async_turn.response == sync_turn.response == "Sure."
    assert async_turn.context.block == sync_turn.context.block
    assert [m.item.index for m in async_turn.context.memories] == [m.item.index for m in sync_turn.context.memories]
    assert async_turn.item.summary == sync_turn.item.summary
    ctx = asyncio.run(async_memory.aprepare("Anything?", session_id="ana"))
    assert ctx.flash.observation == "What is my cat called?"
    item = asyncio.run(async_memory.arecord("Bye", "Bye!", session_id="ana"))
    assert item.index == len(TURNS) + 1


def test_two_sessions_are_isolated():
    memory = build(session_id="ana")
    for observation, response in [("My dog is called Rex.", "Hi Rex!"), ("I live in Oslo.", "Cold!")]:
        memory.record(observation, response, session_id="bo")
    ana = memory.prepare("What is my pet called?", session_id="ana")
    bo = memory.prepare("What is my pet called?", session_id="bo")
    assert all(m.item.session_id == "ana" for m in ana.memories) and ana.flash.session_id == "ana"
    assert [m.item.observation for m in bo.memories] == ["My dog is called Rex."]
    assert bo.flash.observation == "I live in Oslo." and "Miso" not in bo.block and "Rex" not in ana.block
    assert memory.stream.sessions() == ["ana", "bo"]
    assert memory.clear("bo") == 2 and memory.history("bo") == [] and len(memory.history("ana")) == len(TURNS)


# ------------------------------------------------------------------------------------------ stream


def test_stream_roundtrip_and_validation(tmp_path):
    path = tmp_path / "scm.sqlite"
    with SCMStream(path) as stream:
        first = stream.append("s", "obs", "resp", summary="sum", embedding=np.array([0.5, -1.0, 2.0]))
        second = stream.append("s", "obs2", "resp2")
        assert (first.index, second.index) == (0, 1) and second.embedding is None
        with pytest.raises(TypeError, match="session_id"):
            stream.append("", "a", "b")
        with pytest.raises(ValueError, match="finite"):
            stream.append("s", "a", "b", embedding=np.array([np.nan]))
        with pytest.raises(TypeError, match="observation"):
            stream.append("s", 1, "b")  # type: ignore[arg-type]
    with SCMStream(path) as stream:
        items = stream.items("s")
        assert [i.index for i in items] == [0, 1] and items[0].embedding.dtype == np.float32
        assert items[0].embedding.tolist() == [0.5, -1.0, 2.0] and items[0].summary == "sum"
        assert stream.last("s").observation == "obs2" and stream.last("t") is None
        assert stream.count("s") == 2


def test_memory_validation():
    with pytest.raises(ValueError, match="3-10"):
        SelfControlledMemory(FakeController(), k=0)
    with pytest.raises(TypeError, match="SCMStream"):
        SelfControlledMemory(FakeController(), stream=42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="embed_documents"):
        SelfControlledMemory(FakeController(), embedder=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ContextRelation"):
        SelfControlledMemory(FakeController(), relation=0.8)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fusion_template"):
        SelfControlledMemory(FakeController(), fusion_template="no placeholders")
    with pytest.raises(ValueError, match="paper: 800"):
        SelfControlledMemory(FakeController(), item_tokens=-1)
    memory = SelfControlledMemory(FakeController(), embedder=HashingEmbedder(dim=8))
    with pytest.raises(TypeError, match="session_id"):
        memory.prepare("hi", session_id="")
    with pytest.raises(TypeError, match="observation"):
        memory.prepare(None)  # type: ignore[arg-type]


def test_embedder_dimension_change_is_reported():
    memory = build()
    memory._embedder = HashingEmbedder(dim=32)
    with pytest.raises(ValueError, match="dimension"):
        memory.prepare("What is my cat called?", session_id="ana")


WRITER = textwrap.dedent(
    """
    import sys
    from fragrel_integrations.core.scm import SelfControlledMemory
    from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel

    memory = SelfControlledMemory(
        ScriptedChatModel(lambda m: "Summary of a turn."), stream=sys.argv[1], embedder=HashingEmbedder(dim=64)
    )
    memory.record("My cat is called Miso.", "Nice name.", session_id="ana")
    memory.record("I live in Lisbon.", "Lovely city.", session_id="ana")
    memory.record("My dog is Rex.", "Woof.", session_id="bo")
    """
)

READER = textwrap.dedent(
    """
    import json, sys
    from fragrel_integrations.core.scm import SelfControlledMemory
    from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel

    memory = SelfControlledMemory(
        ScriptedChatModel(lambda m: "yes"), stream=sys.argv[1], embedder=HashingEmbedder(dim=64)
    )
    context = memory.prepare("What is my cat called?", session_id="ana")
    print(json.dumps({
        "ana": [[i.index, i.observation, i.response, i.summary] for i in memory.history("ana")],
        "bo": [i.observation for i in memory.history("bo")],
        "recalled": [m.item.observation for m in context.memories],
        "flash": context.flash.observation,
    }))
    """
)


def test_persistence_across_processes(tmp_path):
    path = str(tmp_path / "stream.sqlite")
    subprocess.run([sys.executable, "-c", WRITER, path], check=True, timeout=120)
    out = subprocess.run(
        [sys.executable, "-c", READER, path], check=True, timeout=120, capture_output=True, text=True
    ).stdout
    data = json.loads(out)
    assert data["ana"] == [
        [0, "My cat is called Miso.", "Nice name.", "Summary of a turn."],
        [1, "I live in Lisbon.", "Lovely city.", "Summary of a turn."],
    ]
    assert data["bo"] == ["My dog is Rex."]
    assert data["recalled"] == ["My cat is called Miso."] and data["flash"] == "I live in Lisbon."
    # and this process sees the same stream, and can continue it
    memory = SelfControlledMemory(FakeController(), stream=path, embedder=HashingEmbedder(dim=64))
    assert memory.record("Bye.", "Bye!", session_id="ana").index == 2


APPENDER = textwrap.dedent(
    """
    import sys
    from fragrel_integrations.core.scm import SCMStream

    with SCMStream(sys.argv[1]) as stream:
        for i in range(25):
            stream.append("shared", f"{sys.argv[2]} {i}", "ok", embedding=[1.0, float(i)])
    """
)


def test_concurrent_processes_never_reuse_an_index(tmp_path):
    path = str(tmp_path / "shared.sqlite")
    SCMStream(path).close()  # create the schema first
    procs = [subprocess.Popen([sys.executable, "-c", APPENDER, path, name]) for name in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    with SCMStream(path) as stream:
        items = stream.items("shared")
    assert [i.index for i in items] == list(range(50))
    for name in ("a", "b"):  # each writer's own turns keep their order
        mine = [i.observation for i in items if i.observation.startswith(name + " ")]
        assert mine == [f"{name} {i}" for i in range(25)]


def test_core_imports_no_framework_and_no_model():
    code = (
        "import sys, fragrel_integrations.core.scm; "
        "print([m for m in ('langchain', 'langchain_core', 'langgraph', 'llama_index', 'sentence_transformers', "
        "'llama_cpp') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]"


def test_stream_cache_sees_appends_and_clears_from_another_connection(tmp_path):
    path = tmp_path / "chat.db"
    reader, writer = SCMStream(path), SCMStream(path)
    writer.append("ana", "one", "1", embedding=np.ones(2))
    assert [it.observation for it in reader.items("ana")] == ["one"]
    writer.append("ana", "two", "2", embedding=np.ones(2))
    got = reader.items("ana")
    assert [it.observation for it in got] == ["one", "two"]
    got.pop()  # the caller's list, not the cache
    assert len(reader.items("ana")) == 2
    with pytest.raises(ValueError):
        reader.items("ana")[0].embedding[0] = 5.0  # shared vectors are read-only
    writer.clear("ana")
    writer.append("ana", "new one", "1")
    writer.append("ana", "new two", "2")  # same count and indexes as before the clear
    assert [it.observation for it in reader.items("ana")] == ["new one", "new two"]
    writer.clear("ana")
    assert reader.items("ana") == []
    reader.close()
    writer.close()


# ------------------------------------------------------------------------------------------ turn matrix


def _recalled(memory: SelfControlledMemory, question: str, session_id: str = "ana") -> list[tuple[int, float]]:
    context = memory.prepare(question, session_id=session_id)
    return [(m.item.index, round(m.score, 6)) for m in context.memories]


def _expected(memory: SelfControlledMemory, question: str, session_id: str = "ana") -> list[tuple[int, float]]:
    """Top-k by the public scores() over freshly stacked vectors: what the cached matrix must reproduce."""
    items = memory.stream.items(session_id)[:-1]
    query = memory.embed_query(question)
    s = memory.scores(query, items, np.stack([it.embedding for it in items]), question)
    top = sorted(int(i) for i in np.argsort(-s, kind="stable")[: memory.k])
    return [(items[i].index, round(float(s[i]), 6)) for i in top]


@pytest.mark.parametrize(
    "options",
    [{}, {"relation": ContextRelation(0.8), "alpha": 0.5}, {"scorer": "hybrid", "relation": ContextRelation(0.3)}],
    ids=["dense", "fragrel", "hybrid-fragrel"],
)
def test_the_session_matrix_grows_with_the_stream_and_gives_the_same_scores(options):
    memory = build(k=3, activation=False, **options)
    assert _recalled(memory, "What is my cat called?") == _expected(memory, "What is my cat called?")
    n = memory.sessions.matrices["ana"].n
    memory.record("My sister lives in Porto.", "Nice.", session_id="ana")
    memory.record("I bought a red bicycle.", "Fun!", session_id="ana")
    assert _recalled(memory, "Where does my sister live?") == _expected(memory, "Where does my sister live?")
    assert memory.sessions.matrices["ana"].n == n + 2  # only the two new turns were stacked


def test_the_session_matrix_is_rebuilt_after_a_clear_and_refill():
    memory = build(k=2, activation=False)
    _recalled(memory, "cat")
    old = memory.sessions.matrices["ana"]
    memory.stream.clear("ana")  # behind the memory's back: new items, new objects
    for observation, response in [("I play the cello.", "Lovely."), ("My dog is Rex.", "Cute."), ("Hi", "Hello")]:
        memory.record(observation, response, session_id="ana")
    assert _recalled(memory, "What instrument do I play?") == _expected(memory, "What instrument do I play?")
    assert memory.sessions.matrices["ana"] is not old and memory.sessions.matrices["ana"].n == 2


class _FreshObjectsStream:
    """A MemoryStream that returns new MemoryItem objects on every read (no cache of its own)."""

    def __init__(self) -> None:
        self.inner = SCMStream(":memory:")

    def items(self, session_id):
        return [dataclasses.replace(it) for it in self.inner.items(session_id)]

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_stream_without_its_own_cache_still_gets_exact_scores():
    stream = _FreshObjectsStream()
    memory = SelfControlledMemory(FakeController(), stream=stream, embedder=HashingEmbedder(dim=256), k=2)
    for observation, response in TURNS:
        memory.record(observation, response, session_id="ana")
    for question in ("What is my cat called?", "Where do I live?"):
        assert _recalled(memory, question) == _expected(memory, question)


def test_concurrent_growth_of_the_matrix_falls_back_to_a_private_copy():
    memory = build(k=2, activation=False)
    _recalled(memory, "cat")
    for text in ("Turn without a vector one.", "Turn without a vector two."):
        memory.stream.append("ana", text, "ok")  # no embedding: the matrix step must embed them (and yield)
    candidates = memory.stream.items("ana")[:-1]
    first = memory.sessions.turn_matrix("ana", candidates, True)
    call = next(first)  # paused while "embedding" the new turns
    other = memory.sessions.turn_matrix("ana", candidates, True)
    other_call = next(other)
    with pytest.raises(StopIteration) as done_other:
        other.send(other_call.fn(*other_call.args))  # the other caller grows the shared matrix first
    with pytest.raises(StopIteration) as done_first:
        first.send(call.fn(*call.args))
    (m1, n1), (m2, n2) = (done.value.value.view(len(candidates)) for done in (done_first, done_other))
    assert m1.shape == m2.shape == (len(candidates), 256)
    assert np.array_equal(m1, m2) and np.array_equal(n1, n2)
    assert memory.sessions.matrices["ana"].n == len(candidates)  # grown once, not twice
    assert done_first.value.value is not memory.sessions.matrices["ana"]  # the late caller got a private copy
    layout = done_first.value.value.layout(len(candidates))
    assert layout.positions.tolist() == [it.index for it in candidates]


def test_turn_matrix_rejects_a_new_dimension():
    from fragrel_integrations.core.scm.vectors import TurnMatrix

    items = [MemoryItem("s", i, "q", "a") for i in range(2)]
    matrix = TurnMatrix.from_vectors(items[:1], [np.ones(4, np.float32)])
    with pytest.raises(ValueError, match="dimension"):
        matrix.append(items[1:], [np.ones(3, np.float32)])


# ------------------------------------------------------------------------------------------ failure behaviour


class RawController:
    """A controller model with plain invoke/ainvoke (no ChatModelBase checks): per request kind a reply, a value
    that is not text (None), or an exception; it may ignore max_tokens."""

    def __init__(self, **answers) -> None:
        self.answers = {"activation": "yes", "sufficiency": "yes", "summary": "Summary: a turn.", "response": "OK."}
        self.answers.update(answers)
        self.calls: list[tuple[str, int | None]] = []

    def invoke(self, messages, *, temperature=None, max_tokens=None, stop=None):
        k = kind(messages)
        self.calls.append((k, max_tokens))
        answer = self.answers[k]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def ainvoke(self, messages, *, temperature=None, max_tokens=None, stop=None):
        return self.invoke(messages, temperature=temperature, max_tokens=max_tokens, stop=stop)


def run_turn(memory, text, mode, **kwargs):
    if mode == "sync":
        return memory.chat(text, session_id="ana", **kwargs)
    return asyncio.run(memory.achat(text, session_id="ana", **kwargs))


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("failure", [RuntimeError("controller down"), None, 42])
def test_a_failing_summary_keeps_the_turn_and_its_reply(mode, failure):
    """Regression (issue 15): the summary call failing after the reply exists lost the reply and the turn."""
    memory = build(RawController(), turns=TURNS[:3])
    memory.controller.model.answers["summary"] = failure
    memory.controller.model.answers["response"] = "Your cat is Miso."
    with pytest.warns(RuntimeWarning, match=r"turn 3 of session 'ana' was stored with no summary") as caught:
        turn = run_turn(memory, "What is my cat called?", mode)
    message = str(caught[0].message)
    expected = "controller down" if isinstance(failure, BaseException) else "must return the reply text (str)"
    assert expected in message
    assert turn.response == "Your cat is Miso."
    stored = memory.history("ana")[-1]
    assert (stored.index, stored.observation, stored.response, stored.summary) == (
        3,
        "What is my cat called?",
        "Your cat is Miso.",
        "",
    )
    assert stored.embedding is not None  # embedded on the full text, so it is recalled like any turn
    memory.controller.model.answers["summary"] = "Summary: fine again."
    nxt = run_turn(memory, "And my job?", mode)
    assert nxt.context.flash.index == 3 and nxt.item.summary == "fine again."


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_failing_embedder_at_write_back_keeps_the_turn(mode):
    memory = build(RawController(), turns=TURNS[:3])
    embedder = memory.embedder
    real = embedder.embed_documents

    def failing(texts):
        raise OSError("embedding server unreachable")

    embedder.embed_documents = failing
    with pytest.warns(RuntimeWarning, match="no embedding .*embedding server unreachable"):
        turn = run_turn(memory, "What is my cat called?", mode)
    assert memory.history("ana")[-1].embedding is None and memory.history("ana")[-1].response == "OK."
    assert turn.item.index == 3
    embedder.embed_documents = real
    run_turn(memory, "Where do I work?", mode)
    context = memory.prepare("Tell me about cats", session_id="ana")  # turn 3 is embedded when it is a candidate
    assert context.flash.index == 4 and [m.item.index for m in context.memories] == [0, 1, 2, 3]


def test_an_interrupted_write_back_stores_the_turn_then_stops():
    """KeyboardInterrupt (sync) and a cancelled task (async) during the summary call keep the turn."""
    memory = build(RawController(), turns=TURNS[:2])
    memory.controller.model.answers["summary"] = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        memory.chat("First question?", session_id="ana")
    assert memory.history("ana")[-1].observation == "First question?"
    assert memory.history("ana")[-1].response == "OK."

    class Slow(RawController):
        async def ainvoke(self, messages, **kwargs):
            if kind(messages) == "summary":
                self.calls.append(("summary", kwargs.get("max_tokens")))
                await asyncio.sleep(30)
            return self.invoke(messages, **kwargs)

    memory = build(Slow(), turns=TURNS[:2])
    memory.controller.model.calls.clear()

    async def cancel_during_summary():
        task = asyncio.create_task(memory.achat("Second question?", session_id="ana"))
        while not any(k == "summary" for k, _ in memory.controller.model.calls):
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(cancel_during_summary(), 10))
    stored = memory.history("ana")[-1]
    assert (stored.observation, stored.response, stored.summary) == ("Second question?", "OK.", "")


def test_a_controller_returning_none_names_the_fix():
    memory = build(RawController(), turns=TURNS[:3])
    memory.controller.model.answers["activation"] = None
    with pytest.raises(TypeError, match="returned NoneType for the activation question; its invoke/ainvoke must"):
        memory.prepare("What is my cat called?", session_id="ana")
    with pytest.raises(TypeError, match="returned NoneType for the summary-sufficiency"):
        memory.controller.decide_sufficiency(None)
    memory = build(RawController(), turns=TURNS[:3])
    memory.controller.model.answers["response"] = None
    with pytest.raises(TypeError, match="returned NoneType instead of the reply; its invoke/ainvoke must return"):
        memory.chat("Hi", session_id="ana")
    assert len(memory.history("ana")) == 3  # no reply, nothing to store


def test_model_output_is_capped_before_it_is_stored():
    """Regression (issue 15): a controller ignoring max_tokens stored a 10 MB summary."""
    huge = "Summary: " + "lorem ipsum " * 900_000  # ~10.8 MB
    memory = build(RawController(), turns=TURNS[:3], response_max_tokens=64)
    memory.controller.model.answers.update(summary=huge, activation="yes " * 500_000, response="word " * 200_000)
    start = time.perf_counter()
    turn = memory.chat("What is my cat called?", session_id="ana")
    assert time.perf_counter() - start < 5
    cap = OUTPUT_CHARS_PER_TOKEN * memory.controller.summary_max_tokens
    stored = memory.history("ana")[-1]
    assert 0 < len(stored.summary) <= cap and stored.summary.startswith("lorem ipsum")
    assert len(stored.response) <= OUTPUT_CHARS_PER_TOKEN * 64 and stored.response == turn.response
    assert len(turn.context.activation.raw) <= OUTPUT_CHARS_PER_TOKEN * DECISION_MAX_TOKENS
    assert turn.context.activation.value is True
    # without response_max_tokens the reply is the model's business: stored whole
    memory = build(RawController(response="word " * 1000), turns=TURNS[:1])
    assert len(memory.chat("Hi", session_id="ana").item.response) == len(("word " * 1000).strip())


@pytest.mark.parametrize(
    "reply",
    [
        " " * 100_000 + "x",
        "answer" + " " * 100_000 + "x",
        "Answer:" * 20_000,
        "summary" + " " * 100_000,
        "a" * 100_000,
        "-" * 100_000 + "yes",
    ],
)
def test_controller_parsers_are_linear_on_adversarial_replies(reply):
    controller = SCMController(FakeController())
    start = time.perf_counter()
    parse_yes_no(reply)
    controller.decide_activation(reply)
    controller.summary_text(reply, "Hi", "Hello")
    SCMController.clean_summary(reply, "Hi", "Hello")  # uncapped: still linear
    assert time.perf_counter() - start < 1.0
