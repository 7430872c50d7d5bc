"""SCM gates: yes/no by probability (threshold logic, text fallback, the llama.cpp and OpenAI backends) and the
model-free lexical / embedding activation gates."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
from _llm_fixtures import FakeOpenAIServer
from test_scm_core import kind as scm_kind

from fragrel_integrations.core.scm import (
    ACTIVATION_EXAMPLES,
    DEFAULT_ACTIVATION_THRESHOLD,
    EmbeddingGate,
    LexicalGate,
    MemoryItem,
    SCMController,
    SelfControlledMemory,
)
from fragrel_integrations.core.scm.gates import NameVocabulary, activation_gate, capitalised_words
from fragrel_integrations.models.yes_no import (
    YesNoScorer,
    ayes_no_probability,
    yes_no_from_logprobs,
    yes_no_probability,
)
from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel


def kind(messages) -> str:
    """Which controller request ``messages`` (a list, or one prompt string) is (few-shot activation included)."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    if messages[0]["role"] == "system" and "answer yes if it asks about" in messages[0]["content"]:
        return "activation"
    return scm_kind(messages)


class ProbModel(ScriptedChatModel):
    """A scripted model that also answers yes/no questions by a given probability (None: no probabilities)."""

    def __init__(self, p_yes=0.9, text="No."):
        self.p_yes = p_yes
        self.prob_calls: list[str] = []
        super().__init__(lambda m: text if kind(m) != "summary" else "A summary.")

    def yes_no_probability(self, messages):
        self.prob_calls.append(kind(messages))
        return self.p_yes(messages) if callable(self.p_yes) else self.p_yes

    async def ayes_no_probability(self, messages):
        await asyncio.sleep(0)
        return self.yes_no_probability(messages)


TURNS = [
    ("My cat is called Miso and she is grey.", "Miso is a lovely name."),
    ("I work as a nurse in Lisbon.", "Nursing is demanding work."),
    ("My favourite dessert is lemon tart.", "Lemon tart is delicious."),
    ("We visited Porto last weekend.", "Porto is beautiful."),
]


def build(controller, **kwargs) -> SelfControlledMemory:
    memory = SelfControlledMemory(controller, embedder=HashingEmbedder(dim=256), k=2, **kwargs)
    for observation, response in TURNS:
        memory.record(observation, response, session_id="ana")
    return memory


# --------------------------------------------------------------------------------------- logprobs -> P(yes)
def test_yes_no_from_logprobs_sums_spellings_and_normalises():
    p = yes_no_from_logprobs([("Yes", np.log(0.3)), (" yes", np.log(0.1)), ("No", np.log(0.2)), ("You", -0.5)])
    assert p == pytest.approx(0.4 / 0.6)
    assert yes_no_from_logprobs([("no", -0.01), ("NO", -5.0)]) < 0.5


def test_yes_no_from_logprobs_missing_side():
    # a top-k list without "no": no's probability is bounded by the smallest listed one
    p = yes_no_from_logprobs([("Yes", np.log(0.5)), ("Sure", np.log(0.1))])
    assert p == pytest.approx(0.5 / 0.6)
    assert yes_no_from_logprobs([("Yes", -1.0)], complete=True) == 1.0
    assert yes_no_from_logprobs([("No", -1.0)], complete=True) == 0.0
    assert yes_no_from_logprobs([("Maybe", -0.1)]) is None
    assert yes_no_from_logprobs([]) is None
    assert yes_no_from_logprobs([("Yes", float("nan")), ("No", -1.0), ("x", -2.0)]) == pytest.approx(
        np.exp(-2) / (np.exp(-2) + np.exp(-1))
    )


def test_yes_no_probability_helpers_check_the_model():
    assert not isinstance(ScriptedChatModel(["yes"]), YesNoScorer)
    assert yes_no_probability(ScriptedChatModel(["yes"]), "q") is None
    assert yes_no_probability(ProbModel(0.25), "q") == 0.25
    assert yes_no_probability(ProbModel(None), "q") is None
    assert asyncio.run(ayes_no_probability(ProbModel(0.75), "q")) == 0.75
    for bad in (1.5, -0.1, "0.5", True):
        with pytest.raises(ValueError, match=r"probability in \[0, 1\] or None"):
            yes_no_probability(ProbModel(bad), "q")


# --------------------------------------------------------------------------------------- controller thresholds
def test_controller_decides_by_probability_against_the_threshold():
    model = ProbModel(0.31)
    controller = SCMController(model, activation_threshold=0.3, sufficiency_threshold=0.6)
    assert controller.uses_probability
    d = controller.needs_memory("What did I say?")
    assert (d.value, d.parsed, d.probability) == (True, True, 0.31) and "P(yes)=0.310" in d.raw
    model.p_yes = 0.29
    assert controller.needs_memory("What did I say?").value is False
    item = MemoryItem("s", 0, "I like tea.", "Noted.", "The user likes tea.")
    model.p_yes = 0.59
    assert controller.summary_suffices("What do I like?", item).value is False  # its own threshold
    model.p_yes = 0.6
    assert controller.summary_suffices("What do I like?", item).value is True
    assert model.calls == []  # no text generation at all
    assert controller.decide_probability(0.3).value is True  # >= threshold


def test_controller_default_threshold_and_modes():
    assert SCMController(ProbModel()).activation_threshold == DEFAULT_ACTIVATION_THRESHOLD
    text = SCMController(ProbModel(0.99, text="No."), decision="text")
    assert not text.uses_probability
    d = text.needs_memory("Hi")
    assert (d.value, d.probability) == (False, None) and text.model.prob_calls == []
    # a model without probabilities: "auto" parses text; "probability" is refused up front
    assert SCMController(ScriptedChatModel(["yes"])).needs_memory("Hi").value is True
    with pytest.raises(TypeError, match="decision='probability' needs a model with yes_no_probability"):
        SCMController(ScriptedChatModel(["yes"]), decision="probability")
    with pytest.raises(ValueError, match="decision must be one of"):
        SCMController(ProbModel(), decision="logits")
    for name in ("activation_threshold", "sufficiency_threshold"):
        for bad in (1.5, -0.1, True, "0.5"):
            with pytest.raises(ValueError, match=f"{name} must be a probability in"):
                SCMController(ProbModel(), **{name: bad})
    with pytest.raises(ValueError, match="question must be"):
        SCMController(ProbModel()).decide_probability(0.5, "summary")


def test_controller_falls_back_to_text_when_no_probability_comes():
    model = ProbModel(None, text="Yes.")
    d = SCMController(model, decision="probability").needs_memory("What did I say?")
    assert (d.value, d.parsed, d.probability, d.raw) == (True, True, None, "Yes.")
    assert model.prob_calls == ["activation"] and len(model.calls) == 1


def test_few_shot_activation_messages():
    flash = MemoryItem("s", 3, "Hello", "Hi!")
    by_probability = SCMController(ProbModel())
    assert by_probability.activation_examples == ACTIVATION_EXAMPLES  # the default where it was measured to help
    msgs = by_probability.activation_messages("Do you remember my cat?", flash)
    assert msgs[0]["role"] == "system" and "User: Hello\nAssistant: Hi!" in msgs[0]["content"]
    assert [m["role"] for m in msgs[1:]] == ["user", "assistant"] * len(ACTIVATION_EXAMPLES) + ["user"]
    assert [m["content"] for m in msgs[2:-1:2]] == ["yes" if y else "no" for _, y in ACTIVATION_EXAMPLES]
    assert msgs[-1] == {"role": "user", "content": "Do you remember my cat?"}
    assert "first turn" in by_probability.activation_messages("Hi", None)[0]["content"]
    # text parsing keeps the one-message prompt; () forces it; custom examples are used as given
    assert len(SCMController(ScriptedChatModel(["x"])).activation_messages("Hi", flash)) == 1
    assert len(SCMController(ProbModel(), activation_examples=()).activation_messages("Hi", flash)) == 1
    custom = SCMController(ScriptedChatModel(["x"]), activation_examples=[("What did I say?", True)])
    assert [m["content"] for m in custom.activation_messages("Hi", flash)[1:]] == ["What did I say?", "yes", "Hi"]
    for bad, match in (
        ("What did I say?", "must be a list of"),
        ([("What did I say?",)], "must be a .message, needs_memory. pair"),
        ([("", True)], "non-empty str, True or False"),
        ([("Hi", "yes")], "non-empty str, True or False"),
    ):
        with pytest.raises((TypeError, ValueError), match=match):
            SCMController(ScriptedChatModel(["x"]), activation_examples=bad)
    with pytest.raises(ValueError, match="activation_system_prompt must contain"):
        SCMController(ProbModel(), activation_system_prompt="no placeholder")


# --------------------------------------------------------------------------------------- memory workflow
def test_memory_asks_the_activation_gate_by_probability_sync_and_async():
    model = ProbModel(lambda m: 0.9)
    memory = build(model)
    n_calls = len(model.calls)  # the summaries
    ctx = memory.prepare("What is my cat called?", session_id="ana")
    assert ctx.activation.probability == 0.9 and ctx.activation.value and ctx.memories
    assert len(model.calls) == n_calls  # no text question was generated
    model.p_yes = 0.1
    actx = asyncio.run(memory.aprepare("Write a haiku.", session_id="ana"))
    assert actx.activation.probability == 0.1 and not actx.activation.value and actx.memories == ()
    assert model.prob_calls == ["activation", "activation"]


def test_memory_sufficiency_by_probability():
    model = ProbModel(lambda m: 0.95 if kind(m) == "activation" else 0.7)
    memory = build(model, item_tokens=0, total_tokens=0)
    ctx = memory.prepare("What is my cat called?", session_id="ana")
    assert ctx.memories and all(m.decision.probability == 0.7 and m.use_summary for m in ctx.memories)
    model.p_yes = lambda m: 0.95 if kind(m) == "activation" else 0.2
    ctx = memory.prepare("What is my cat called?", session_id="ana")
    assert ctx.memories and not any(m.use_summary for m in ctx.memories)


def test_memory_text_fallback_when_the_model_gives_no_probability():
    model = ProbModel(None, text="Yes")
    ctx = build(model).prepare("What is my cat called?", session_id="ana")
    assert ctx.activation.value and ctx.activation.probability is None and ctx.activation.raw == "Yes"


def test_memory_activation_argument_is_validated():
    with pytest.raises(ValueError, match=r"activation must be True, False or one of \['auto', 'controller', 'lexical'"):
        SelfControlledMemory(ScriptedChatModel(["x"]), activation="lexcial")
    with pytest.raises(TypeError, match="activation must be True, False"):
        SelfControlledMemory(ScriptedChatModel(["x"]), activation=3)
    with pytest.raises(TypeError, match="summarize must be True or False"):
        SelfControlledMemory(ScriptedChatModel(["x"]), summarize="yes")
    memory = SelfControlledMemory(ScriptedChatModel(["x"]), activation="controller")
    assert memory.activation is True
    assert isinstance(SelfControlledMemory(ScriptedChatModel(["x"]), activation="lexical").activation, LexicalGate)
    with pytest.raises(ValueError, match="auto_activation"):
        activation_gate("auto")


def test_auto_activation_asks_your_model_and_gates_the_embedded_one():
    """The default asks the controller, except with the embedded SmolLM2-135M (0.68 held-out by probability),
    seen through every wrapper: then the lexical gate decides, whatever the embedder."""
    from _llm_fixtures import get_embedded

    from fragrel_integrations.langchain import FragRelChatModel
    from fragrel_integrations.llama_index import FragRelLLM
    from fragrel_integrations.models import CachedChatModel, LlamaCppChatModel
    from fragrel_integrations.models.transformers_chat import smollm2_gguf_path

    assert SelfControlledMemory(ScriptedChatModel(["x"])).activation is True
    embedded = get_embedded()
    wrapped = [
        embedded,
        CachedChatModel(embedded, ":memory:"),
        FragRelChatModel(model=embedded),
        FragRelLLM(model=embedded),
        SCMController(embedded),
    ]
    for model in wrapped:
        assert isinstance(SelfControlledMemory(model).activation, LexicalGate), model
        assert isinstance(SelfControlledMemory(model, embedder=HashingEmbedder()).activation, LexicalGate), model
        assert SelfControlledMemory(model, activation="controller").activation is True
        assert isinstance(SelfControlledMemory(model, activation="embedding").activation, EmbeddingGate)
    copy = LlamaCppChatModel(str(smollm2_gguf_path()), n_ctx=512)  # the shipped file, by its path
    try:
        assert isinstance(SelfControlledMemory(copy).activation, LexicalGate)
    finally:
        copy.close()


# --------------------------------------------------------------------------------------- lexical gate
HISTORY = [
    "User: My sister Ana moved to Porto last spring.\nAssistant: Porto is lovely.",
    "User: Maybe I will visit her.\nAssistant: maybe in June?",
]


@pytest.mark.parametrize(
    "message",
    [
        "What did I tell you about my sister?",
        "Do you remember the city I mentioned?",
        "As I said earlier, I like trains.",
        "How is Ana doing these days?",
        "Is Porto far from the sea?",
    ],
)
def test_lexical_gate_says_yes_to_references(message):
    assert LexicalGate().decide(message, HISTORY).value is True


@pytest.mark.parametrize(
    "message",
    [
        "Write a haiku about autumn.",
        "What is 17*3?",
        "Who painted the Mona Lisa?",  # names, but not ones the conversation used
        "Maybe you can explain photosynthesis?",  # "Maybe" is written in lower case in the turns: not a name
        "What do you think about cats?",
    ],
)
def test_lexical_gate_says_no_to_self_contained_requests(message):
    d = LexicalGate().decide(message, HISTORY)
    assert d.value is False and d.score == 0.0, d.raw


def test_lexical_gate_options_and_validation():
    assert LexicalGate(names=False).decide("How is Ana?", HISTORY).value is False
    assert LexicalGate(min_score=2).decide("How is Ana?", HISTORY).value is False
    assert LexicalGate(min_score=2).decide("Remember how Ana is?", HISTORY).value is True
    assert LexicalGate(cues=[r"\bbanana\b"]).decide("A banana, please.", []).value is True
    with pytest.raises(ValueError, match="not a valid regular expression"):
        LexicalGate(cues=["(unclosed"])
    with pytest.raises(TypeError, match="cues must be a list"):
        LexicalGate(cues="remember")
    with pytest.raises(ValueError, match="min_score must be an int >= 1"):
        LexicalGate(min_score=0)
    with pytest.raises(TypeError, match="names must be True or False"):
        LexicalGate(names="yes")
    with pytest.raises(TypeError, match="observation must be str"):
        LexicalGate().decide(None, HISTORY)
    with pytest.raises(TypeError, match="earlier turns must be str"):
        LexicalGate().decide("Hi", [None])
    assert capitalised_words("I told Ana's friend in Porto. The End") == {"Ana", "Porto", "End"}
    assert NameVocabulary(["Ana met ana."]).names({"Ana"}) == set()


def test_lexical_gate_is_linear_on_a_huge_message():
    d = LexicalGate().decide("a " * 500_000 + "remember", HISTORY)
    assert d.value is False  # cut to MAX_MESSAGE_CHARS: the cue is beyond it


def test_memory_with_the_lexical_gate_needs_no_model():
    def no_questions(messages):
        if kind(messages) in ("activation", "sufficiency"):
            raise AssertionError("the lexical gate must not ask the model")
        return "A summary."

    memory = build(ScriptedChatModel(no_questions), activation="lexical")
    assert memory.prepare("Write a haiku about autumn.", session_id="ana").memories == ()
    ctx = memory.prepare("How is Miso?", session_id="ana")
    assert ctx.activation.value and "name Miso" in ctx.activation.raw and ctx.memories
    # a name first used in a later turn is known after that turn is stored (the cached vocabulary grows)
    assert not memory.prepare("Is Coimbra nice?", session_id="ana").activation.value
    memory.record("I study in Coimbra.", "Nice.", session_id="ana")
    memory.record("Any tips?", "Sleep well.", session_id="ana")  # the Coimbra turn is no longer the flash turn
    assert memory.prepare("Is Coimbra nice?", session_id="ana").activation.value
    memory.clear("ana")
    for observation, response in TURNS:
        memory.record(observation, response, session_id="ana")
    assert not memory.prepare("Is Coimbra nice?", session_id="ana").activation.value  # forgotten with the session


# --------------------------------------------------------------------------------------- embedding gate
def test_embedding_gate_threshold_and_validation():
    gate = EmbeddingGate(0.5)
    assert gate.decide([0.1, 0.5]).value is True and gate.decide([0.1, 0.49]).value is False
    assert gate.decide([]).value is False
    assert gate.decide([float("nan"), 0.7]).score == 0.7
    with pytest.raises(ValueError, match="all NaN"):
        gate.decide([float("nan")])
    for bad in (1.5, -2, True, "0.5"):
        with pytest.raises(ValueError, match=r"threshold must be a cosine similarity in \[-1, 1\]"):
            EmbeddingGate(bad)


def test_memory_with_the_embedding_gate():
    def no_questions(messages):
        if kind(messages) in ("activation", "sufficiency"):
            raise AssertionError("the embedding gate must not ask the model")
        return "A summary."

    memory = SelfControlledMemory(
        ScriptedChatModel(no_questions), embedder=HashingEmbedder(dim=256), summarize=False, activation="embedding"
    )
    for observation, response in TURNS:
        memory.record(observation, response, session_id="ana")
    same = memory.prepare(memory.history("ana")[0].text, session_id="ana")  # identical text: cosine 1
    assert same.activation.value and same.activation.score == pytest.approx(1.0) and same.memories
    other = memory.prepare("zebra quantum xylophone", session_id="ana")
    assert not other.activation.value and other.activation.score < 0.46 and other.memories == ()
    strict = SelfControlledMemory(
        ScriptedChatModel(no_questions), embedder=HashingEmbedder(dim=256), summarize=False,
        activation=EmbeddingGate(1.0), stream=memory.stream,
    )  # fmt: skip
    assert not strict.prepare("My cat is called Miso.", session_id="ana").activation.value


# --------------------------------------------------------------------------------------- OpenAI logprobs parsing
def _openai(url):
    pytest.importorskip("openai")
    from fragrel_integrations.models.openai_chat import OpenAIChatModel

    return OpenAIChatModel("m", base_url=url, max_retries=3)


def test_openai_yes_no_probability_from_top_logprobs():
    with FakeOpenAIServer(reply="Yes", logprobs="logprobs") as server:
        model = _openai(server.base_url)
        assert isinstance(model, YesNoScorer)
        assert model.yes_no_probability("Is it?") == pytest.approx(0.25)
        assert asyncio.run(model.ayes_no_probability("Is it?")) == pytest.approx(0.25)
        req = server.requests[0]
        assert req["logprobs"] is True and req["top_logprobs"] == 20 and req["max_tokens"] == 1
        d = SCMController(model, activation_threshold=0.2).needs_memory("Is it?")
        assert d.value and d.probability == pytest.approx(0.25)


@pytest.mark.parametrize("mode", ["absent", "refuse"])
def test_openai_without_logprobs_falls_back_to_text_once(mode):
    with FakeOpenAIServer(reply="Yes", logprobs=mode) as server:
        model = _openai(server.base_url)
        controller = SCMController(model)
        d = controller.needs_memory("What did I say?")
        assert (d.value, d.parsed, d.probability) == (True, True, None)  # the text reply "Yes"
        asked = sum(bool(r.get("logprobs")) for r in server.requests)
        assert asked == 1 and model.logprobs_supported is False  # a refusal is not retried
        controller.needs_memory("And now?")
        assert sum(bool(r.get("logprobs")) for r in server.requests) == 1  # not asked again


# --------------------------------------------------------------------------------------- the embedded model
@pytest.mark.slow
def test_embedded_model_yes_no_probability_is_a_probability_that_depends_on_the_prompt():
    from _llm_fixtures import get_embedded

    model = get_embedded()
    assert isinstance(model, YesNoScorer)
    prompt = [{"role": "user", "content": "Count from 1 to 5."}]
    before = model.invoke(prompt, max_tokens=12)
    a = model.yes_no_probability("Is Paris the capital of France? Answer yes or no.")
    b = model.yes_no_probability("Write a long poem about the sea, in French, with no yes or no in it.")
    assert 0.0 <= a <= 1.0 and 0.0 <= b <= 1.0
    assert abs(a - b) > 1e-3
    assert model.yes_no_probability("Is Paris the capital of France? Answer yes or no.") == pytest.approx(a)
    assert model.invoke(prompt, max_tokens=12) == before  # the evaluated prompt does not disturb generation
    assert asyncio.run(model.ayes_no_probability("Is Paris the capital of France? Answer yes or no.")) == (
        pytest.approx(a)
    )


@pytest.mark.slow
def test_openai_server_logprobs_agree_with_the_embedded_logits():
    pytest.importorskip("openai")
    from _llm_fixtures import SERVER_MODEL, get_embedded, get_server

    from fragrel_integrations.models.openai_chat import OpenAIChatModel

    server = OpenAIChatModel(SERVER_MODEL, base_url=get_server().base_url)
    question = "Is Paris the capital of France? Answer yes or no."
    p = server.yes_no_probability(question)
    assert p is not None and server.logprobs_supported is not False  # llama-cpp-python's server returns logprobs
    assert p == pytest.approx(get_embedded().yes_no_probability(question), abs=0.05)  # same model, same prompt


class _Scored(ScriptedChatModel):
    """A scripted model that also reports P(yes), as the embedded llama.cpp model does."""

    def yes_no_probability(self, messages):
        return 0.8

    async def ayes_no_probability(self, messages):
        return 0.8


def test_the_cache_wrapper_passes_the_probability_through():
    from fragrel_integrations.models.response_cache import CachedChatModel

    for wrap in (lambda m: CachedChatModel(m, ":memory:"),):
        assert yes_no_probability(wrap(_Scored(["yes"])), "Is water wet?") == 0.8
        assert asyncio.run(ayes_no_probability(wrap(_Scored(["yes"])), "Is water wet?")) == 0.8
        assert yes_no_probability(wrap(ScriptedChatModel(["yes"])), "Is water wet?") is None


@pytest.mark.slow
def test_langchain_chat_openai_logprobs_agree_with_the_embedded_logits():
    pytest.importorskip("langchain_openai")
    import httpx
    from _llm_fixtures import SERVER_MODEL, get_embedded, get_server
    from langchain_openai import ChatOpenAI

    from fragrel_integrations.models import as_chat_model

    # its own async client: langchain-openai caches one per base_url, bound to the event loop of its first use
    # (another test's asyncio.run), and a closed loop's client fails with "Connection error"
    chat = ChatOpenAI(
        model=SERVER_MODEL,
        base_url=get_server().base_url,
        api_key="none",
        max_retries=0,
        http_async_client=httpx.AsyncClient(),
    )
    model = as_chat_model(chat)  # what every component does with a LangChain model
    question = "Is Paris the capital of France? Answer yes or no."
    p = model.yes_no_probability(question)
    assert p is not None and model.logprobs_supported is True
    assert p == pytest.approx(get_embedded().yes_no_probability(question), abs=0.05)  # same model, same prompt
    assert asyncio.run(model.ayes_no_probability(question)) == pytest.approx(p, abs=0.05)  # server cache jitter
    decision = SCMController(model).needs_memory("What did I tell you my dog's name was?")
    assert decision.probability is not None  # the SCM gate now answers by probability behind LangChain


def _lc_logprobs_model(metadata_logprobs, calls, error=None):
    pytest.importorskip("langchain_core")
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class LogprobsChat(BaseChatModel):
        logprobs: bool | None = None
        top_logprobs: int | None = None

        @property
        def _llm_type(self) -> str:
            return "logprobs-test"

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            calls.append(kwargs)
            if error is not None:
                raise error
            meta = {} if metadata_logprobs is None else {"logprobs": metadata_logprobs}
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content="Yes", response_metadata=meta))])

    return LogprobsChat()


def test_langchain_adapter_reads_openai_style_logprobs_and_remembers_their_absence():
    from fragrel_integrations.models.framework_models import LangChainChatModel

    calls: list[dict] = []
    top = [{"token": "Yes", "logprob": math.log(0.6)}, {"token": " no", "logprob": math.log(0.2)}]
    model = LangChainChatModel(
        _lc_logprobs_model({"content": [{"token": "Yes", "logprob": -0.5, "top_logprobs": top}]}, calls)
    )
    assert model.yes_no_probability("Is water wet?") == pytest.approx(0.75)
    assert calls[-1]["logprobs"] is True and calls[-1]["top_logprobs"] == 20 and calls[-1]["max_tokens"] == 1
    calls.clear()
    silent = LangChainChatModel(_lc_logprobs_model(None, calls))
    assert silent.yes_no_probability("Is water wet?") is None and silent.logprobs_supported is False
    assert silent.yes_no_probability("Is water wet?") is None and len(calls) == 1  # not asked again
    from langchain_core.language_models import FakeListChatModel

    plain = LangChainChatModel(FakeListChatModel(responses=["yes"]))
    assert plain.yes_no_probability("Is water wet?") is None  # no logprobs fields: never asked
    refusing = LangChainChatModel(_lc_logprobs_model(None, calls, ValueError("logprobs are not supported")))
    assert refusing.yes_no_probability("Is water wet?") is None and refusing.logprobs_supported is False
    broken = LangChainChatModel(_lc_logprobs_model(None, calls, ConnectionError("server down")))
    with pytest.raises(ConnectionError):
        broken.yes_no_probability("Is water wet?")  # only refusals fall back; real failures are not hidden


@pytest.mark.slow
def test_llama_index_openai_like_logprobs_agree_with_the_embedded_logits():
    pytest.importorskip("llama_index.llms.openai_like")
    from _llm_fixtures import SERVER_MODEL, get_embedded, get_server
    from llama_index.llms.openai_like import OpenAILike

    from fragrel_integrations.models import as_chat_model

    llm = OpenAILike(model=SERVER_MODEL, api_base=get_server().base_url, api_key="none", is_chat_model=True)
    model = as_chat_model(llm)
    question = "Is Paris the capital of France? Answer yes or no."
    p = model.yes_no_probability(question)
    assert p is not None and model.logprobs_supported is True
    assert p == pytest.approx(get_embedded().yes_no_probability(question), abs=0.05)  # same model, same prompt
    decision = SCMController(model).needs_memory("What did I tell you my dog's name was?")
    assert decision.probability is not None
    completion = as_chat_model(OpenAILike(model=SERVER_MODEL, api_base=get_server().base_url, api_key="none"))
    assert completion.yes_no_probability(question) is None  # a completion-mode LLM is not asked
