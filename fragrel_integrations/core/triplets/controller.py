"""The RET-LLM controller: a prompted (not fine-tuned) chat model writes and reads the triplet memory through
the text API, and the controller executes the calls between the model's turns.

* :meth:`TripletMemoryController.memorize` — the model turns a statement into ``[MEM_WRITE{..}]`` calls; the
  controller stores every well-formed one.
* :meth:`TripletMemoryController.answer` — the model asks ``[MEM_READ{..}]``; the controller runs each read
  on the store, shows the model the answered calls ``[MEM_READ{..}: {..}; ..]`` and asks for the answer; this
  repeats up to ``max_rounds`` times.

Results the model writes itself are never trusted (every read is re-executed); values coming back from the
store are escaped, so stored text cannot smuggle a call into the conversation. Writes during ``answer`` are
ignored unless ``allow_writes=True``.

>>> from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel
>>> store = TripletStore(":memory:", embedder=HashingEmbedder(dim=64))
>>> model = ScriptedChatModel([
...     "[MEM_WRITE{Dan Jaffe>>works at>>Google}]",
...     "[MEM_READ{Dan Jaffe>>works at>>}]",
...     "Dan Jaffe works at Google.",
... ])
>>> ctl = TripletMemoryController(model, store)
>>> [tuple(r.triplet) for r in ctl.memorize("Dan Jaffe is a software engineer at Google.").records]
[('Dan Jaffe', 'works at', 'Google')]
>>> ctl.answer("Where does Dan Jaffe work?").answer
'Dan Jaffe works at Google.'
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...models.chat import ChatModel, as_chat_model
from .store import TripletStore, TripletWrite
from .text_api import MemoryCall, escape_term, parse_calls, render_read, strip_calls
from .types import Triplet, TripletRecord, namespace_tuple

__all__ = [
    "READ_EXAMPLES",
    "READ_SYSTEM_PROMPT",
    "WRITE_EXAMPLES",
    "WRITE_SYSTEM_PROMPT",
    "AnswerResult",
    "MemorizeResult",
    "TripletMemoryController",
    "lenient_triplets",
]

logger = logging.getLogger(__name__)

WRITE_SYSTEM_PROMPT = (
    "You store facts in a memory of triplets. For every fact in the user's statement write one call "
    "[MEM_WRITE{subject>>relation>>object}] on its own line. Use a name or noun phrase as subject and object "
    "and a short verb phrase as relation. Write only the calls."
)

READ_SYSTEM_PROMPT = (
    "You answer questions with a memory of triplets (subject, relation, object). To look something up, write "
    "one call [MEM_READ{subject>>relation>>}] or [MEM_READ{>>relation>>object}], leaving the unknown field "
    "empty, and stop. The memory answers with the matching triplets after a colon. When you have the answer, "
    "reply with one short sentence and no call."
)

WRITE_EXAMPLES: tuple[tuple[str, str], ...] = (
    (
        "Statement: Dan Jaffe is a software engineer at Google. He lives in Boston.",
        "[MEM_WRITE{Dan Jaffe>>works at>>Google}]\n[MEM_WRITE{Dan Jaffe>>lives in>>Boston}]",
    ),
    ("Statement: Paris is the capital of France.", "[MEM_WRITE{Paris>>capital of>>France}]"),
    (
        "Statement: Lisa Wong founded Nimbus Labs in 2015.",
        "[MEM_WRITE{Lisa Wong>>founded>>Nimbus Labs}]\n[MEM_WRITE{Nimbus Labs>>founded in>>2015}]",
    ),
)
"""Few-shot turns (user, assistant) shown before every statement; small models copy the format from them."""

READ_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("Question: Where does Dan Jaffe work?", "[MEM_READ{Dan Jaffe>>works at>>}]"),
    ("Question: Who founded Nimbus Labs?", "[MEM_READ{>>founded>>Nimbus Labs}]"),
    ("Question: What is the capital of France?", "[MEM_READ{>>capital of>>France}]"),
)
"""Few-shot turns shown before every question."""

_FOLLOW_UP = (
    "Facts from memory:\n{facts}\n\nQuestion: {question}\n"
    "Answer the question in one short sentence using these facts. If they do not contain the answer, "
    "say that you do not know."
)

_LOOSE = re.compile(r"^\s*(?:[-*\d.)]+\s*)?\{?([^{}\[\]\n]+?)>>([^{}\[\]\n]+?)>>([^{}\[\]\n]+?)\}?\s*$", re.MULTILINE)


def lenient_triplets(text: str) -> list[Triplet]:
    """Triplets a weak model wrote without the call wrapper: one ``a >> b >> c`` (optionally ``{..}``) per line.

    >>> lenient_triplets("1. Dan >> works at >> Google")
    [Triplet(t1='Dan', t2='works at', t3='Google')]
    """
    out = []
    for m in _LOOSE.finditer(text):
        parts = [p.strip() for p in m.groups()]
        if all(parts) and not any(">>" in p for p in parts):
            out.append(Triplet(*parts))
    return out


@dataclass
class MemorizeResult:
    """What :meth:`TripletMemoryController.memorize` stored, and the model's raw reply."""

    records: list[TripletRecord]
    reply: str
    calls: list[MemoryCall] = field(default_factory=list)


@dataclass
class AnswerResult:
    """The final answer, every read executed (with its records), and the whole conversation."""

    answer: str
    reads: list[tuple[MemoryCall, list[TripletRecord]]]
    messages: list[dict[str, str]]
    rounds: int
    fallback: bool = False


class TripletMemoryController:
    """Drive a prompted chat model over a :class:`TripletStore` with RET-LLM's text API.

    Args:
        model: any chat model (our ChatModel protocol, a LangChain chat model or a LlamaIndex LLM).
        store: the triplet memory.
        namespace: where this controller reads and writes.
        max_rounds: model turns allowed to issue reads before it must answer.
        max_calls: calls executed per model turn at most (the rest are ignored).
        lenient: accept ``a >> b >> c`` lines as writes when the model forgets the call wrapper.
        write_prompt, read_prompt: system prompts (defaults above).
        write_examples, read_examples: few-shot ``(user, assistant)`` turns put before the real request.
        max_tokens, temperature: generation settings for every turn.
        extractive_fallback: when the model's last turn holds no text besides calls, answer with the facts
            read (``AnswerResult.fallback`` tells); off: the answer is then empty.
    """

    def __init__(
        self,
        model: Any,
        store: TripletStore,
        *,
        namespace: str | Sequence[str] | None = None,
        max_rounds: int = 3,
        max_calls: int = 8,
        lenient: bool = True,
        write_prompt: str = WRITE_SYSTEM_PROMPT,
        read_prompt: str = READ_SYSTEM_PROMPT,
        write_examples: Sequence[tuple[str, str]] = WRITE_EXAMPLES,
        read_examples: Sequence[tuple[str, str]] = READ_EXAMPLES,
        max_tokens: int = 256,
        temperature: float = 0.0,
        extractive_fallback: bool = True,
    ) -> None:
        self.model: ChatModel = as_chat_model(model)
        if not isinstance(store, TripletStore):
            raise TypeError(f"store must be a TripletStore, got {type(store).__name__}")
        for name, value in (("max_rounds", max_rounds), ("max_calls", max_calls), ("max_tokens", max_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.store = store
        self.namespace = namespace_tuple(namespace)
        self.max_rounds = max_rounds
        self.max_calls = max_calls
        self.lenient = lenient
        self.write_prompt = write_prompt
        self.read_prompt = read_prompt
        self.write_examples = _check_examples(write_examples, "write_examples")
        self.read_examples = _check_examples(read_examples, "read_examples")
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.extractive_fallback = bool(extractive_fallback)

    # ------------------------------------------------------------------------------------------ shared steps
    def _write_messages(self, statement: str) -> list[dict[str, str]]:
        if not isinstance(statement, str) or not statement.strip():
            raise ValueError("statement must be a non-empty string")
        return _with_examples(self.write_prompt, self.write_examples, f"Statement: {statement}")

    def _writes_from(self, reply: str) -> tuple[list[MemoryCall], list[TripletWrite]]:
        calls = [c for c in parse_calls(reply) if c.kind == "write"][: self.max_calls]
        triplets = [c.triplet for c in calls]
        if not triplets and self.lenient:
            triplets = lenient_triplets(reply)[: self.max_calls]
        return calls, [TripletWrite(t, namespace=self.namespace) for t in triplets]

    def _read_messages(self, question: str) -> list[dict[str, str]]:
        if not isinstance(question, str) or not question.strip():
            raise ValueError("question must be a non-empty string")
        return _with_examples(self.read_prompt, self.read_examples, f"Question: {question}")

    def execute(
        self, text: str, *, allow_writes: bool = True
    ) -> tuple[str, list[tuple[MemoryCall, list[TripletRecord]]]]:
        """Run the calls in ``text``: writes (if allowed) are stored, reads are answered.

        Returns the text up to the last executed call, with every read replaced by its answered form, and
        the executed reads with their records.
        """
        calls = parse_calls(text)[: self.max_calls]
        out: list[str] = []
        reads: list[tuple[MemoryCall, list[TripletRecord]]] = []
        pos = 0
        writes = []
        for call in calls:
            out.append(text[pos : call.start])
            pos = call.end
            if call.kind == "write":
                if allow_writes:
                    writes.append(TripletWrite(call.triplet, namespace=self.namespace))
                out.append(text[call.start : call.end])
                continue
            records = self.store.read(*call.fields, namespace=self.namespace)
            reads.append((call, records))
            out.append(render_read(call.fields, [r.triplet for r in records]))
        if writes:
            self.store.write_many(writes)
        return "".join(out) if calls else text, reads

    def _follow_up(self, question: str, reads: list[tuple[MemoryCall, list[TripletRecord]]]) -> str:
        facts = _facts(reads) or "(nothing found)"
        return _FOLLOW_UP.format(facts=facts, question=question)

    def _final(self, reply: str, reads: list[tuple[MemoryCall, list[TripletRecord]]]) -> tuple[str, bool]:
        """The reply without memory calls; if the model wrote nothing else (small models often just repeat the
        call) and ``extractive_fallback`` is on, the facts read, as sentences. Second value: fallback used."""
        text = strip_calls(reply)
        if not text and self.extractive_fallback and any(recs for _, recs in reads):
            return _facts(reads, escape=False).replace("\n", " "), True
        return text, False

    def _done(
        self,
        reply: str,
        reads: list[tuple[MemoryCall, list[TripletRecord]]],
        messages: list[dict[str, str]],
        rounds: int,
    ) -> tuple[str, list[tuple[MemoryCall, list[TripletRecord]]], list[dict[str, str]], int, bool]:
        text, fallback = self._final(reply, reads)
        return text, reads, [*messages, _assistant(reply)], rounds, fallback

    # ------------------------------------------------------------------------------------------ sync API
    def memorize(self, statement: str) -> MemorizeResult:
        """Ask the model for ``MEM_WRITE`` calls about ``statement`` and store them (one transaction)."""
        reply = self.model.invoke(
            self._write_messages(statement), temperature=self.temperature, max_tokens=self.max_tokens
        )
        calls, writes = self._writes_from(reply)
        records = self.store.write_many(writes) if writes else []
        return MemorizeResult(records, reply, calls)

    def answer(self, question: str, *, allow_writes: bool = False) -> AnswerResult:
        """Let the model read the memory (up to ``max_rounds`` turns) and answer ``question``.

        A turn without a read is the answer. A turn that only repeats earlier reads ends the reading, and the
        model is asked once more for the answer (as after ``max_rounds``).
        """
        messages = self._read_messages(question)
        all_reads: list[tuple[MemoryCall, list[TripletRecord]]] = []
        for round_no in range(1, self.max_rounds + 1):
            reply = self.model.invoke(messages, temperature=self.temperature, max_tokens=self.max_tokens)
            executed, reads = self.execute(reply, allow_writes=allow_writes)
            if not reads:
                return AnswerResult(*self._done(reply, all_reads, messages, round_no))
            repeated = _repeats(reads, all_reads)
            all_reads += reads
            messages += [_assistant(executed), {"role": "user", "content": self._follow_up(question, reads)}]
            if repeated:
                break
        reply = self.model.invoke(messages, temperature=self.temperature, max_tokens=self.max_tokens)
        return AnswerResult(*self._done(reply, all_reads, messages, round_no + 1))

    # ------------------------------------------------------------------------------------------ async API
    async def amemorize(self, statement: str) -> MemorizeResult:
        """Async :meth:`memorize` (the store runs in a worker thread)."""
        reply = await self.model.ainvoke(
            self._write_messages(statement), temperature=self.temperature, max_tokens=self.max_tokens
        )
        calls, writes = self._writes_from(reply)
        records = await asyncio.to_thread(self.store.write_many, writes) if writes else []
        return MemorizeResult(records, reply, calls)

    async def aanswer(self, question: str, *, allow_writes: bool = False) -> AnswerResult:
        """Async :meth:`answer`."""
        messages = self._read_messages(question)
        all_reads: list[tuple[MemoryCall, list[TripletRecord]]] = []
        for round_no in range(1, self.max_rounds + 1):
            reply = await self.model.ainvoke(messages, temperature=self.temperature, max_tokens=self.max_tokens)
            executed, reads = await asyncio.to_thread(self.execute, reply, allow_writes=allow_writes)
            if not reads:
                return AnswerResult(*self._done(reply, all_reads, messages, round_no))
            repeated = _repeats(reads, all_reads)
            all_reads += reads
            messages += [_assistant(executed), {"role": "user", "content": self._follow_up(question, reads)}]
            if repeated:
                break
        reply = await self.model.ainvoke(messages, temperature=self.temperature, max_tokens=self.max_tokens)
        return AnswerResult(*self._done(reply, all_reads, messages, round_no + 1))


def _facts(reads: list[tuple[MemoryCall, list[TripletRecord]]], *, escape: bool = True) -> str:
    """The distinct triplets read, one plain sentence per line; terms escaped so none can form a call."""
    seen: dict[tuple[str, str, str], None] = {}
    for _, records in reads:
        for r in records:
            seen.setdefault(tuple(r.triplet), None)
    fmt = escape_term if escape else (lambda t: t)
    return "\n".join(" ".join(fmt(t) for t in trip) + "." for trip in seen)


def _repeats(
    reads: list[tuple[MemoryCall, list[TripletRecord]]], earlier: list[tuple[MemoryCall, list[TripletRecord]]]
) -> bool:
    seen = {c.fields for c, _ in earlier}
    return all(c.fields in seen for c, _ in reads)


def _assistant(content: str) -> dict[str, str]:
    return {"role": "assistant", "content": content}


def _check_examples(examples: Sequence[tuple[str, str]], name: str) -> tuple[tuple[str, str], ...]:
    out = tuple(tuple(e) for e in examples)
    if not all(len(e) == 2 and all(isinstance(x, str) for x in e) for e in out):
        raise TypeError(f"{name} must be a sequence of (user, assistant) string pairs")
    return out  # type: ignore[return-value]


def _with_examples(system: str, examples: Sequence[tuple[str, str]], request: str) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system}]
    for user, assistant in examples:
        messages += [{"role": "user", "content": user}, _assistant(assistant)]
    return [*messages, {"role": "user", "content": request}]
