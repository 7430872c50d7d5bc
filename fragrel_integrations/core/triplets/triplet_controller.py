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

Model output is untrusted input, handled in bounded, linear time:

* a reply longer than ``max_reply_chars`` (default 20,000) is cut to that length before it is parsed (the rest
  is ignored, with a logged warning); a reply that is not a string raises TypeError naming the model;
* every parser here is a left-to-right scan, linear in the reply's length (no backtracking regular expression);
* a term longer than ``max_term_chars`` (default 200), or holding a NUL character or a lone surrogate, makes
  its call (or lenient line) malformed;
* malformed calls are skipped and reported (``MemorizeResult.skipped``): one bad item never spoils a batch.
  The valid writes are stored in one transaction; if the store rejects the batch with ValueError/TypeError,
  each write is stored alone and only the rejected ones are skipped. Nothing already stored is lost.

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

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..._validation import check_positive_int
from ...models.chat import ChatModel
from ...models.convert import as_chat_model
from ...models.structured import format_kwargs
from ..steps import CallStep, ChatStep, Steps, adrive, drive
from .controller_prompts import (
    FOLLOW_UP_TEMPLATE,
    READ_EXAMPLES,
    READ_FORMAT,
    READ_SYSTEM_PROMPT,
    WRITE_EXAMPLES,
    WRITE_FORMAT,
    WRITE_SYSTEM_PROMPT,
    check_examples,
    with_examples,
)
from .facts import Triplet, TripletRecord, namespace_tuple
from .lenient import DEFAULT_MAX_TERM_CHARS, lenient_scan
from .memory_store import TripletStore, TripletWrite
from .text_api import MemoryCall, SkippedCall, escape_term, render_read, scan_calls, strip_calls

__all__ = ["DEFAULT_MAX_REPLY_CHARS", "AnswerResult", "MemorizeResult", "TripletMemoryController"]

logger = logging.getLogger(__name__)

_BROKEN_CALL = re.compile(r"\[MEM_(?:READ|WRITE)\b[^\]\n]*\]?")
"""What is left of a malformed call (``[MEM_READ{>>John>>France: ]``): never shown as an answer."""

DEFAULT_MAX_REPLY_CHARS = 20_000
"""Characters of one model reply the controller parses (about 5,000 tokens; the default max_tokens is 256)."""


@dataclass
class MemorizeResult:
    """What :meth:`TripletMemoryController.memorize` stored, and the model's raw reply."""

    records: list[TripletRecord]
    reply: str
    calls: list[MemoryCall] = field(default_factory=list)
    skipped: list[SkippedCall] = field(default_factory=list)
    """Malformed calls (or lenient lines) and writes the store rejected; the rest was stored."""


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
        max_reply_chars: characters of each reply parsed at most (the rest is ignored, with a warning).
        max_term_chars: longest term stored or read from model output (a longer one makes its call malformed).
        constrained: with a model that enforces reply formats (the embedded llama.cpp model, OpenAI-compatible
            servers), write replies under :data:`WRITE_FORMAT`, so every reply is well-formed calls; other models
            answer freely and are parsed as before.
        constrained_reads: also write the turns of :meth:`answer` under :data:`READ_FORMAT` (one read call or one
            line of answer). Off by default: with SmolLM2-135M it made every read turn well-formed but answered no
            more bAbI questions and took 3-5x longer (benchmarks/results/llm_steps.md).
        relax_reads: a read that names a relation and finds nothing is run again without the relation (e.g.
            ``[MEM_READ{Mary>>is in>>}]`` finds ``Mary >> moved to >> bathroom``), so a model that words the
            relation differently from the write still sees the facts about its subject; the facts are shown
            oldest first. Off: such a read answers nothing.
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
        max_reply_chars: int = DEFAULT_MAX_REPLY_CHARS,
        max_term_chars: int = DEFAULT_MAX_TERM_CHARS,
        constrained: bool = True,
        constrained_reads: bool = False,
        relax_reads: bool = True,
    ) -> None:
        self.model: ChatModel = as_chat_model(model)
        if not isinstance(store, TripletStore):
            raise TypeError(f"store must be a TripletStore, got {type(store).__name__}")
        for name, value in (
            ("max_rounds", max_rounds),
            ("max_calls", max_calls),
            ("max_tokens", max_tokens),
            ("max_reply_chars", max_reply_chars),
            ("max_term_chars", max_term_chars),
        ):
            check_positive_int(value, name)
        self.store = store
        self.namespace = namespace_tuple(namespace)
        self.max_rounds = max_rounds
        self.max_calls = max_calls
        self.lenient = lenient
        self.write_prompt = write_prompt
        self.read_prompt = read_prompt
        self.write_examples = check_examples(write_examples, "write_examples")
        self.read_examples = check_examples(read_examples, "read_examples")
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.extractive_fallback = bool(extractive_fallback)
        self.max_reply_chars = max_reply_chars
        self.max_term_chars = max_term_chars
        for name, flag in (
            ("constrained", constrained),
            ("constrained_reads", constrained_reads),
            ("relax_reads", relax_reads),
        ):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be True or False, got {flag!r}")
        self.constrained = constrained
        self.constrained_reads = constrained_reads
        self.relax_reads = relax_reads
        # the reply formats, for models that enforce them ({} otherwise: free text, parsed as before)
        self._wf = format_kwargs(self.model, WRITE_FORMAT) if constrained else {}
        self._rf = format_kwargs(self.model, READ_FORMAT) if constrained_reads else {}

    # ------------------------------------------------------------------------------------------ shared steps
    def _write_messages(self, statement: str) -> list[dict[str, str]]:
        if not isinstance(statement, str) or not statement.strip():
            raise ValueError("statement must be a non-empty string")
        return with_examples(self.write_prompt, self.write_examples, f"Statement: {statement}")

    def _capped(self, reply: object) -> str:
        """The part of a model reply that is parsed: at most ``max_reply_chars`` characters."""
        if not isinstance(reply, str):
            raise TypeError(
                f"the chat model {type(self.model).__name__} returned {type(reply).__name__}, expected str; "
                "check that it returns the reply text"
            )
        if len(reply) > self.max_reply_chars:
            logger.warning(
                "model reply of %d characters cut to max_reply_chars=%d before parsing",
                len(reply),
                self.max_reply_chars,
            )
            return reply[: self.max_reply_chars]
        return reply

    def _scan(self, text: str) -> tuple[list[MemoryCall], list[SkippedCall]]:
        return scan_calls(self._capped(text), max_term_chars=self.max_term_chars)

    def _writes_from(self, reply: str) -> tuple[list[MemoryCall], list[tuple[Triplet, int]], list[SkippedCall]]:
        """The write calls, the triplets to store (with where they start in the reply), and what was skipped."""
        text = self._capped(reply)
        found, skipped = scan_calls(text, max_term_chars=self.max_term_chars)
        calls = [c for c in found if c.kind == "write"][: self.max_calls]
        triplets = [(c.triplet, c.start) for c in calls]
        if not triplets and self.lenient:
            loose, loose_skipped = lenient_scan(text, self.max_term_chars)
            triplets = loose[: self.max_calls]
            skipped += loose_skipped
        return calls, triplets, skipped

    def _store(self, triplets: Sequence[tuple[Triplet, int]], skipped: list[SkippedCall]) -> list[TripletRecord]:
        """Store the triplets in one transaction; if the store rejects the batch (ValueError/TypeError), store
        each alone and add the rejected ones to ``skipped``. Other errors (a closed or locked store) propagate."""
        writes = [TripletWrite(t, namespace=self.namespace) for t, _ in triplets]
        if not writes:
            return []
        try:
            return self.store.write_many(writes)
        except (TypeError, ValueError) as exc:
            if len(writes) == 1:
                skipped.append(_rejected(triplets[0], exc))
                return []
        records: list[TripletRecord] = []
        for item, write in zip(triplets, writes, strict=True):
            try:
                records += self.store.write_many([write])
            except (TypeError, ValueError) as exc:
                skipped.append(_rejected(item, exc))
        return records

    def _read_messages(self, question: str) -> list[dict[str, str]]:
        if not isinstance(question, str) or not question.strip():
            raise ValueError("question must be a non-empty string")
        return with_examples(self.read_prompt, self.read_examples, f"Question: {question}")

    def execute(
        self, text: str, *, allow_writes: bool = True
    ) -> tuple[str, list[tuple[MemoryCall, list[TripletRecord]]]]:
        """Run the calls in ``text``: writes (if allowed) are stored, reads are answered.

        Returns the text up to the last executed call, with every read replaced by its answered form, and
        the executed reads with their records. Only the first ``max_reply_chars`` characters are parsed;
        malformed calls and writes the store rejects are skipped (and logged).
        """
        text = self._capped(text)
        calls, skipped = self._scan(text)
        calls = calls[: self.max_calls]
        out: list[str] = []
        reads: list[tuple[MemoryCall, list[TripletRecord]]] = []
        pos = 0
        writes: list[tuple[Triplet, int]] = []
        for call in calls:
            out.append(text[pos : call.start])
            pos = call.end
            if call.kind == "write":
                if allow_writes:
                    writes.append((call.triplet, call.start))
                out.append(text[call.start : call.end])
                continue
            records = self._read(call.fields)
            reads.append((call, records))
            out.append(render_read(call.fields, [r.triplet for r in records]))
        self._store(writes, skipped)
        for item in skipped:
            logger.warning("skipped memory call at %d: %s", item.start, item.reason)
        return "".join(out) if calls else text, reads

    def _read(self, fields: Sequence[str | None]) -> list[TripletRecord]:
        """The records matching ``fields``; with ``relax_reads``, an empty read that names a relation and
        another term is run again without the relation."""
        records = self.store.read(*fields, namespace=self.namespace)
        t1, t2, t3 = fields
        if records or not self.relax_reads or not t2 or not (t1 or t3):
            return records
        return self.store.read(t1, None, t3, namespace=self.namespace)

    def _follow_up(self, question: str, reads: list[tuple[MemoryCall, list[TripletRecord]]]) -> str:
        facts = _facts(reads) or "(nothing found)"
        return FOLLOW_UP_TEMPLATE.format(facts=facts, question=question)

    def _final(self, reply: str, reads: list[tuple[MemoryCall, list[TripletRecord]]]) -> tuple[str, bool]:
        """The reply without memory calls (malformed ones too); if the model wrote nothing else (small models
        often just repeat the call) and ``extractive_fallback`` is on, the facts read, as sentences. Second value:
        fallback used."""
        text = " ".join(_BROKEN_CALL.sub(" ", strip_calls(self._capped(reply))).split())
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

    # ------------------------------------------------------------------------------------------ workflows
    def _chat(self, messages: list[dict[str, str]], reply_format: dict[str, Any]) -> ChatStep:
        options = {"temperature": self.temperature, "max_tokens": self.max_tokens, **reply_format}
        return ChatStep(self.model, messages, options)

    def _memorize_steps(self, statement: str) -> Steps[MemorizeResult]:
        reply = yield self._chat(self._write_messages(statement), self._wf)
        calls, triplets, skipped = self._writes_from(reply)
        records = (yield CallStep(self._store, (triplets, skipped))) if triplets else []
        return MemorizeResult(records, reply, calls, skipped)

    def _answer_steps(self, question: str, allow_writes: bool) -> Steps[AnswerResult]:
        messages = self._read_messages(question)
        all_reads: list[tuple[MemoryCall, list[TripletRecord]]] = []
        for round_no in range(1, self.max_rounds + 1):
            reply = yield self._chat(messages, self._rf)
            executed, reads = yield CallStep(self.execute, (reply,), {"allow_writes": allow_writes})
            if not reads:
                return AnswerResult(*self._done(reply, all_reads, messages, round_no))
            repeated = _repeats(reads, all_reads)
            all_reads += reads
            messages += [_assistant(executed), {"role": "user", "content": self._follow_up(question, reads)}]
            if repeated:
                break
        reply = yield self._chat(messages, self._rf)
        return AnswerResult(*self._done(reply, all_reads, messages, round_no + 1))

    # ------------------------------------------------------------------------------------------ sync API
    def memorize(self, statement: str) -> MemorizeResult:
        """Ask the model for ``MEM_WRITE`` calls about ``statement`` and store them (one transaction)."""
        return drive(self._memorize_steps(statement))

    def answer(self, question: str, *, allow_writes: bool = False) -> AnswerResult:
        """Let the model read the memory (up to ``max_rounds`` turns) and answer ``question``.

        A turn without a read is the answer. A turn that only repeats earlier reads ends the reading, and the
        model is asked once more for the answer (as after ``max_rounds``).
        """
        return drive(self._answer_steps(question, allow_writes))

    # ------------------------------------------------------------------------------------------ async API
    async def amemorize(self, statement: str) -> MemorizeResult:
        """Async :meth:`memorize` (the store runs in a worker thread)."""
        return await adrive(self._memorize_steps(statement))

    async def aanswer(self, question: str, *, allow_writes: bool = False) -> AnswerResult:
        """Async :meth:`answer`."""
        return await adrive(self._answer_steps(question, allow_writes))


def _facts(reads: list[tuple[MemoryCall, list[TripletRecord]]], *, escape: bool = True) -> str:
    """The distinct triplets read, oldest first (by ``valid_from``, then write order), one plain sentence per
    line; terms escaped so none can form a call."""
    seen: dict[tuple[str, str, str], None] = {}
    for r in sorted((r for _, records in reads for r in records), key=lambda r: (r.valid_from, r.id)):
        seen.setdefault(tuple(r.triplet), None)
    fmt = escape_term if escape else (lambda t: t)
    return "\n".join(" ".join(fmt(t) for t in trip) + "." for trip in seen)


def _rejected(item: tuple[Triplet, int], exc: Exception) -> SkippedCall:
    trip, start = item
    return SkippedCall(start, " >> ".join(trip)[:200], f"the store rejected the write: {exc}")


def _repeats(
    reads: list[tuple[MemoryCall, list[TripletRecord]]], earlier: list[tuple[MemoryCall, list[TripletRecord]]]
) -> bool:
    seen = {c.fields for c, _ in earlier}
    return all(c.fields in seen for c, _ in reads)


def _assistant(content: str) -> dict[str, str]:
    return {"role": "assistant", "content": content}
