"""The SCM controller: the prompts that ask whether memory is needed and whether a summary suffices, the turn
summariser, and a lenient yes/no parser.

:func:`parse_yes_no` reads the first yes/no word of a reply (``yes``, ``no``, ``y``, ``n``, ``true``,
``false``, ``needed``, ``unnecessary``, also after a label such as ``Answer:`` or inside quotes/markdown); when
the first one is not found it accepts a reply that contains only one kind of those words. Anything else is
*unparseable* and returns None. The controller then applies its documented fallback:

* "is memory needed?" unparseable -> **yes** (``activation_fallback``): recalling memory only costs context,
  while skipping it may lose a fact the user refers to;
* "does the summary suffice?" unparseable -> **yes** (``summary_fallback``): the question is only asked when
  the recalled memories exceed the token budget, so keeping the full text would break the budget.

**Yes/no by probability.** When the controller's model can give the probability of its reply's first token
(:class:`~fragrel_integrations.models.yes_no.YesNoScorer`: the embedded llama.cpp model, an OpenAI-compatible
server that returns ``logprobs``), the gates do not parse text: the answer is yes when
``P(yes) / (P(yes) + P(no)) >= threshold`` (``activation_threshold`` for "is memory needed?",
``sufficiency_threshold`` for "does the summary suffice?"). ``decision="auto"`` (default) does this whenever the
model offers probabilities and parses the text reply otherwise (also when a server returns no logprobs);
``decision="text"`` always parses text; ``decision="probability"`` requires a model with the capability (and
still falls back to text for a call that returns no probabilities).

**Few-shot activation.** With ``activation_examples`` the "is memory needed?" request is a chat: a system message
(:data:`ACTIVATION_SYSTEM_PROMPT`, with the previous turn), then each example message as a user turn answered
"yes"/"no" by the assistant, then the new message as the last user turn. By default
(``activation_examples=None``) a controller that asks by probability uses :data:`ACTIVATION_EXAMPLES` (six
written examples, none from a benchmark) and one that parses text uses the one-message
:data:`ACTIVATION_PROMPT`; pass ``()`` for the one-message prompt always, or your own ``(message, needs_memory)``
pairs. Measured with SmolLM2-135M on the dev part of ``benchmarks/data/scm_activation.json``: the one-message
prompt gives P(yes) no signal (mean 0.29 for messages that need memory, 0.30 for those that do not), the few-shot
chat separates them (see ``benchmarks/results/llm_steps_scm.md``).

:data:`DEFAULT_ACTIVATION_THRESHOLD` is the neutral 0.5: on the dev part of ``benchmarks/data/scm_activation.json``
the embedded SmolLM2-135M with the few-shot prompt (above) did best at 0.53 (accuracy 0.75) and nearly as well at
0.5 (0.72; held-out 0.68 against 0.47 for parsing text), and a capable model is near-certain either way.
:data:`DEFAULT_SUFFICIENCY_THRESHOLD` is also 0.5: no labelled data for
that question was at hand.

Backends that enforce reply formats (the embedded llama.cpp model, OpenAI-compatible servers) answer the yes/no
questions under :data:`YES_NO_FORMAT` (exactly ``yes`` or ``no``) and write a summary as one bounded line; the
parsers stay the fallback for other models.

Replies are untrusted: each must be a ``str`` (anything else, e.g. ``None``, raises a TypeError naming the model
to fix) and is cut to :data:`~fragrel_integrations.core.token_budget.OUTPUT_CHARS_PER_TOKEN` characters per token it
was asked for (:data:`DECISION_MAX_TOKENS` for the yes/no questions, ``summary_max_tokens`` for a summary)
before it is parsed or stored, so a model that ignores ``max_tokens`` cannot store a 10 MB summary. The parsers
use only linear-time patterns.

>>> parse_yes_no("Yes, the user refers to an earlier turn.")
True
>>> parse_yes_no("**No**")
False
>>> parse_yes_no("Answer: NO.")
False
>>> parse_yes_no("I cannot tell.") is None
True
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..._validation import check_positive_int, check_type
from ...models.chat import ChatModel
from ...models.convert import as_chat_model
from ...models.structured import ReplyFormat, format_kwargs
from ...models.yes_no import YesNoScorer, ayes_no_probability, yes_no_probability
from ..steps import ChatStep, Steps, drive
from ..token_budget import cap_output, storable_text
from .interactions import Decision, MemoryItem

__all__ = [
    "ACTIVATION_EXAMPLES",
    "ACTIVATION_PROMPT",
    "ACTIVATION_SYSTEM_PROMPT",
    "DECISION_MAX_TOKENS",
    "DECISION_MODES",
    "DEFAULT_ACTIVATION_THRESHOLD",
    "DEFAULT_SUFFICIENCY_THRESHOLD",
    "SUFFICIENCY_PROMPT",
    "SUMMARY_PROMPT",
    "YES_NO_FORMAT",
    "SCMController",
    "parse_yes_no",
]

ACTIVATION_PROMPT = """\
You manage the long-term memory of a chat assistant. Earlier conversation turns are stored, but only the \
previous turn is visible. Decide whether answering the new user message needs something from earlier turns: \
facts the user told before, an earlier topic, or a reference such as "as I said", "that book", "my sister".
Greetings, general knowledge questions and self-contained requests do not need memory.

Previous turn:
{flash}

New user message:
{observation}

Does answering the new message need memory of earlier turns? Reply with one word: yes or no."""

ACTIVATION_SYSTEM_PROMPT = """\
You manage the long-term memory of a chat assistant. Earlier conversation turns are stored, but only the previous \
turn is visible:
{flash}

For each user message, answer yes if it asks about something from the earlier conversation (people, events, \
things said before), no if it is a general or self-contained request."""

#: Few-shot examples of the activation question: (user message, needs memory). Written for this library.
ACTIVATION_EXAMPLES: tuple[tuple[str, bool], ...] = (
    ("What is the capital of Italy?", False),
    ("What did my brother say about his new job?", True),
    ("Write a short poem about rain.", False),
    ("When did Tom visit his parents?", True),
    ("How many legs does a spider have?", False),
    ("What was the name of the dog Lisa adopted?", True),
)

SUFFICIENCY_PROMPT = """\
A user asked a chat assistant:
{observation}

This is a summary of an earlier turn of their conversation:
{summary}

Is the summary enough to answer the user's message, so that the full text of that turn is not needed? \
Reply with one word: yes or no."""

SUMMARY_PROMPT = """\
Summarise this turn of a conversation in one or two sentences. Keep every concrete fact (names, numbers, dates, \
places, preferences, decisions) from both the user's message and the assistant's reply.

User: {observation}
Assistant: {response}

Summary:"""

#: Output tokens asked for a yes/no answer (activation and sufficiency questions).
DECISION_MAX_TOKENS = 4
#: How the controller reads a yes/no answer (see the module docstring).
DECISION_MODES = ("auto", "probability", "text")
#: "Memory is needed" when P(yes) / (P(yes) + P(no)) is at least this (checked on dev data with SmolLM2-135M).
DEFAULT_ACTIVATION_THRESHOLD = 0.5
#: "The summary suffices" when P(yes) / (P(yes) + P(no)) is at least this (neutral: not tuned).
DEFAULT_SUFFICIENCY_THRESHOLD = 0.5

#: The constrained reply of the yes/no questions (enforced by backends that support it, see
#: :mod:`fragrel_integrations.models.structured`); other models answer freely and :func:`parse_yes_no` reads them.
YES_NO_FORMAT = ReplyFormat.choice(["yes", "no"], name="yes_no")

_YES = frozenset({"yes", "y", "true", "needed", "necessary", "sufficient", "enough", "correct"})
_NO = frozenset({"no", "n", "false", "unnecessary", "insufficient", "not"})
_WORD = re.compile(r"[a-z]+")
_LABEL = re.compile(r"^\s*(?:answer|reply|decision|output)\s*[:\-]\s*", re.IGNORECASE)
_SUMMARY_LABEL = re.compile(r"^\s*summary\s*:\s*", re.IGNORECASE)


def parse_yes_no(text: str) -> bool | None:
    """True for yes, False for no, None when the reply says neither (see the module docstring).

    >>> parse_yes_no("not needed")
    False
    >>> parse_yes_no("Memory is needed here.")
    True
    >>> parse_yes_no("Either yes or no.") is None
    True
    """
    check_type(text, str, "text must be str")
    words = _WORD.findall(_LABEL.sub("", text.strip(), count=1).lower())
    if not words:
        return None
    if words[0] in _YES:
        return True
    if words[0] in _NO:
        return False
    yes = any(w in _YES for w in words)
    no = any(w in _NO for w in words)
    return yes if yes != no else None


def _check_text(name: str, value: object) -> str:
    return check_type(value, str, f"{name} must be str")


def _check_reply(reply: object, what: str) -> str:
    """A controller reply as text, or a TypeError naming what to fix (a model returning None, a message object)."""
    if not isinstance(reply, str):
        raise TypeError(
            f"the controller's chat model returned {type(reply).__name__} for {what}; its invoke/ainvoke must "
            "return the reply text (str)"
        )
    return reply


def _check_threshold(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    return float(value)


def _check_examples(examples: object) -> tuple[tuple[str, bool], ...]:
    if isinstance(examples, str) or not isinstance(examples, Sequence):
        raise TypeError(f"activation_examples must be a list of (message, needs_memory) pairs, got {examples!r}")
    out = []
    for i, pair in enumerate(examples):
        if not (isinstance(pair, Sequence) and not isinstance(pair, str) and len(pair) == 2):
            raise ValueError(f"activation_examples[{i}] must be a (message, needs_memory) pair, got {pair!r}")
        message, label = pair
        if not isinstance(message, str) or not message.strip() or not isinstance(label, bool):
            raise ValueError(
                f"activation_examples[{i}] must be (non-empty str, True or False), got {(message, label)!r}"
            )
        out.append((message, label))
    return tuple(out)


def _check_template(name: str, template: object, fields: Sequence[str]) -> str:
    _check_text(name, template)
    missing = [f for f in fields if "{" + f + "}" not in template]
    if missing:
        raise ValueError(f"{name} must contain the placeholders {['{' + f + '}' for f in missing]}")
    return template


@dataclass(frozen=True, slots=True)
class _ProbabilityStep:
    """A yes/no question asked by probability (the reply is ``P(yes) / (P(yes) + P(no))`` or None)."""

    controller: SCMController
    messages: list[dict[str, str]]

    def run(self) -> float | None:
        return self.controller.probability(self.messages)

    async def arun(self) -> float | None:
        return await self.controller.aprobability(self.messages)


class SCMController:
    """The LLM controller of SCM. ``model`` is any chat model (LangChain and LlamaIndex models are wrapped).

    Each method has a ``messages`` form (what is sent) and a ``parse``/``decide`` form (what the reply means),
    so the sync and async workflows share the same logic; :meth:`needs_memory`, :meth:`summary_suffices` and
    :meth:`summarize` are the synchronous one-call shortcuts.

    >>> from fragrel_integrations.testing import ScriptedChatModel
    >>> controller = SCMController(ScriptedChatModel(["No.", "maybe"]))
    >>> controller.needs_memory("Hello!")
    Decision(value=False, raw='No.', parsed=True, probability=None, score=None)
    >>> controller.needs_memory("What did I say?")  # unparseable -> the fallback (yes)
    Decision(value=True, raw='maybe', parsed=False, probability=None, score=None)

    ``decision``, ``activation_threshold`` and ``sufficiency_threshold`` choose between yes/no by probability and
    by parsing text (see the module docstring).
    """

    def __init__(
        self,
        model: ChatModel | object,
        *,
        activation_prompt: str = ACTIVATION_PROMPT,
        sufficiency_prompt: str = SUFFICIENCY_PROMPT,
        summary_prompt: str = SUMMARY_PROMPT,
        activation_fallback: bool = True,
        summary_fallback: bool = True,
        summary_max_tokens: int = 96,
        temperature: float | None = 0.0,
        decision: str = "auto",
        activation_threshold: float = DEFAULT_ACTIVATION_THRESHOLD,
        sufficiency_threshold: float = DEFAULT_SUFFICIENCY_THRESHOLD,
        activation_examples: Sequence[tuple[str, bool]] | None = None,
        activation_system_prompt: str = ACTIVATION_SYSTEM_PROMPT,
    ) -> None:
        self.model = as_chat_model(model)
        if decision not in DECISION_MODES:
            raise ValueError(f"decision must be one of {list(DECISION_MODES)}, got {decision!r}")
        if decision == "probability" and not isinstance(self.model, YesNoScorer):
            raise TypeError(
                f"decision='probability' needs a model with yes_no_probability (LlamaCppChatModel, OpenAIChatModel); "
                f"{type(self.model).__name__} has none: use decision='auto' or 'text'"
            )
        self.decision = decision
        self.activation_threshold = _check_threshold("activation_threshold", activation_threshold)
        self.sufficiency_threshold = _check_threshold("sufficiency_threshold", sufficiency_threshold)
        self.activation_system_prompt = _check_template(
            "activation_system_prompt", activation_system_prompt, ("flash",)
        )
        if activation_examples is None:  # few-shot where it was measured to help: the probability path
            activation_examples = ACTIVATION_EXAMPLES if self.uses_probability else ()
        self.activation_examples = _check_examples(activation_examples)
        self.activation_prompt = _check_template("activation_prompt", activation_prompt, ("flash", "observation"))
        self.sufficiency_prompt = _check_template("sufficiency_prompt", sufficiency_prompt, ("observation", "summary"))
        self.summary_prompt = _check_template("summary_prompt", summary_prompt, ("observation", "response"))
        for name, value in (("activation_fallback", activation_fallback), ("summary_fallback", summary_fallback)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be True or False, got {value!r}")
        self.activation_fallback = activation_fallback
        self.summary_fallback = summary_fallback
        self.summary_max_tokens = check_positive_int(summary_max_tokens, "summary_max_tokens")
        self.temperature = temperature

    # ------------------------------------------------------------------------------------------- prompts

    def activation_messages(self, observation: str, flash: MemoryItem | None) -> list[dict[str, str]]:
        """The "is memory needed?" request: one message, or a few-shot chat with ``activation_examples``."""
        flash_text = flash.text if flash is not None else "(none: this is the first turn)"
        observation = _check_text("observation", observation)
        if not self.activation_examples:
            prompt = self.activation_prompt.format(flash=flash_text, observation=observation)
            return [{"role": "user", "content": prompt}]
        messages = [{"role": "system", "content": self.activation_system_prompt.format(flash=flash_text)}]
        for message, label in self.activation_examples:
            messages.append({"role": "user", "content": message})
            messages.append({"role": "assistant", "content": "yes" if label else "no"})
        messages.append({"role": "user", "content": observation})
        return messages

    def sufficiency_messages(self, observation: str, item: MemoryItem) -> list[dict[str, str]]:
        """The "does this memory's summary suffice?" request."""
        prompt = self.sufficiency_prompt.format(observation=observation, summary=item.summary)
        return [{"role": "user", "content": prompt}]

    def summary_messages(self, observation: str, response: str) -> list[dict[str, str]]:
        """The request that summarises one interaction."""
        prompt = self.summary_prompt.format(
            observation=_check_text("observation", observation), response=_check_text("response", response)
        )
        return [{"role": "user", "content": prompt}]

    # ------------------------------------------------------------------------------------------- replies

    def decide_activation(self, reply: str) -> Decision:
        """The activation decision for a reply (the fallback when it is unparseable); the reply is capped."""
        return self._decide(reply, "the activation question", self.activation_fallback)

    def decide_sufficiency(self, reply: str) -> Decision:
        """The "summary suffices" decision for a reply (the fallback when it is unparseable); the reply is capped."""
        return self._decide(reply, "the summary-sufficiency question", self.summary_fallback)

    @staticmethod
    def _decide(reply: object, what: str, fallback: bool) -> Decision:
        reply, _ = cap_output(_check_reply(reply, what), DECISION_MAX_TOKENS)
        value = parse_yes_no(reply)
        return Decision(fallback if value is None else value, reply, value is not None)

    @property
    def uses_probability(self) -> bool:
        """Whether yes/no questions are first asked by probability (``decision`` is not "text" and the model can)."""
        return self.decision != "text" and isinstance(self.model, YesNoScorer)

    def decide_probability(self, probability: float, question: str = "activation") -> Decision:
        """The decision for ``P(yes) / (P(yes) + P(no))`` of the "activation" or "sufficiency" question."""
        if question not in ("activation", "sufficiency"):
            raise ValueError(f"question must be 'activation' or 'sufficiency', got {question!r}")
        p = _check_threshold("probability", probability)
        threshold = self.activation_threshold if question == "activation" else self.sufficiency_threshold
        return Decision(p >= threshold, f"P(yes)={p:.3f} (threshold {threshold:g})", True, probability=p)

    def probability(self, messages: list[dict[str, str]]) -> float | None:
        """``P(yes) / (P(yes) + P(no))`` of the reply to ``messages`` (None: text must be parsed instead)."""
        return yes_no_probability(self.model, messages) if self.uses_probability else None

    async def aprobability(self, messages: list[dict[str, str]]) -> float | None:
        """Async :meth:`probability`."""
        return await ayes_no_probability(self.model, messages) if self.uses_probability else None

    @staticmethod
    def clean_summary(reply: str, observation: str, response: str, max_tokens: int | None = None) -> str:
        """The summary text of a reply; a blank reply falls back to the interaction itself. With ``max_tokens``
        the result is capped (:func:`~fragrel_integrations.core.token_budget.cap_output`), the fallback included.

        >>> SCMController.clean_summary("Summary: Ana likes tea.", "I like tea.", "Noted.")
        'Ana likes tea.'
        >>> SCMController.clean_summary("  ", "I like tea.", "Noted.")
        'User: I like tea. Assistant: Noted.'
        >>> len(SCMController.clean_summary("tea " * 10_000, "I like tea.", "Noted.", max_tokens=4)) <= 64
        True
        """
        text = _check_reply(reply, "the turn summary")
        if max_tokens is not None:  # cut before the work below: the cleaning never sees a 10 MB reply
            text, _ = cap_output(text, max_tokens + 8)  # room for a "Summary:" label
        text = _SUMMARY_LABEL.sub("", text.strip(), count=1).strip()
        text = storable_text(text or f"User: {observation} Assistant: {response}")
        return text if max_tokens is None else cap_output(text, max_tokens)[0]

    # ------------------------------------------------------------------------------------------- one call

    def summary_format(self) -> ReplyFormat:
        """The constrained reply of a turn summary: one line of at most ``3 * summary_max_tokens`` characters
        (no label, no list, no second turn made up after it)."""
        return ReplyFormat.regex(rf"[^\n]{{1,{3 * self.summary_max_tokens}}}", name="turn_summary")

    def _chat(self, messages: list[dict[str, str]], max_tokens: int, reply_format: ReplyFormat) -> ChatStep:
        extra = format_kwargs(self.model, reply_format)  # asked only of models that enforce it
        return ChatStep(self.model, messages, {"temperature": self.temperature, "max_tokens": max_tokens, **extra})

    def decision_steps(self, messages: list[dict[str, str]], question: str) -> Steps[Decision]:
        """Ask the "activation" or "sufficiency" question: by probability when the model offers it, else as text."""
        if self.uses_probability:
            p = yield _ProbabilityStep(self, messages)
            if p is not None:
                return self.decide_probability(p, question)
        reply = yield self._chat(messages, DECISION_MAX_TOKENS, YES_NO_FORMAT)
        return self.decide_activation(reply) if question == "activation" else self.decide_sufficiency(reply)

    def summary_steps(self, observation: str, response: str) -> Steps[str]:
        """Summarise one interaction (see :meth:`summary_text`)."""
        messages = self.summary_messages(observation, response)
        reply = yield self._chat(messages, self.summary_max_tokens, self.summary_format())
        return self.summary_text(reply, observation, response)

    def needs_memory(self, observation: str, flash: MemoryItem | None = None) -> Decision:
        """Ask whether the observation needs long-term memory (by probability when the model can, see
        ``decision``)."""
        return drive(self.decision_steps(self.activation_messages(observation, flash), "activation"))

    def summary_suffices(self, observation: str, item: MemoryItem) -> Decision:
        """Ask whether ``item.summary`` is enough to answer the observation (by probability when the model can)."""
        return drive(self.decision_steps(self.sufficiency_messages(observation, item), "sufficiency"))

    def summary_text(self, reply: object, observation: str, response: str) -> str:
        """The summary to store for a summary reply: checked to be text, cleaned and capped to
        ``summary_max_tokens`` (see :meth:`clean_summary`)."""
        return self.clean_summary(reply, observation, response, self.summary_max_tokens)  # type: ignore[arg-type]

    def summarize(self, observation: str, response: str) -> str:
        """Summarise one interaction."""
        return drive(self.summary_steps(observation, response))

    def __repr__(self) -> str:
        return f"SCMController(model={self.model!r}, decision={self.decision!r})"
