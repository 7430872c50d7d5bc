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

from ..._validation import check_positive_int, check_type
from ...models.chat import ChatModel
from ...models.convert import as_chat_model
from ...models.structured import format_kwargs
from ..steps import CallStep, ChatStep, Steps, adrive, drive
from . import controller_prompts as prompts
from .facts import NamespaceLike, Triplet, TripletRecord, namespace_tuple
from .lenient import DEFAULT_MAX_TERM_CHARS, lenient_scan
from .memory_store import TripletStore, TripletWrite
from .text_api import MemoryCall, SkippedCall, escape_term, render_read, scan_calls, strip_calls

__all__ = ["DEFAULT_MAX_REPLY_CHARS", "AnswerResult", "MemorizeResult", "TripletMemoryController"]

logger = logging.getLogger(__name__)

#: what is left of a malformed call (``[MEM_READ{>>John>>France: ]``): never shown as an answer
_BROKEN_CALL = re.compile(r"\[MEM_(?:READ|WRITE)\b[^\]\n]*\]?")

#: characters of one model reply the controller parses (about 5,000 tokens; the default max_tokens is 256)
DEFAULT_MAX_REPLY_CHARS = 20_000

_Reads = list[tuple[MemoryCall, list[TripletRecord]]]


@dataclass
class MemorizeResult:
    """What :meth:`TripletMemoryController.memorize` stored, and the model's raw reply."""

    records: list[TripletRecord]
    reply: str
    calls: list[MemoryCall] = field(default_factory=list)
    #: malformed calls (or lenient lines) and writes the store rejected; the rest was stored
    skipped: list[SkippedCall] = field(default_factory=list)


@dataclass
class AnswerResult:
    """The final answer, every read executed (with its records), and the whole conversation."""

    answer: str
    reads: _Reads
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
            servers), write replies under :data:`~.controller_prompts.WRITE_FORMAT` (well-formed calls only);
            other models answer freely.
        constrained_reads: also write the turns of :meth:`answer` under :data:`~.controller_prompts.READ_FORMAT`
            (one read call or one line of answer). Off by default: it made small models' read turns well-formed
            but answered no more questions, and took longer (``benchmarks/results/llm_steps.md``).
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
        namespace: NamespaceLike = None,
        max_rounds: int = 3,
        max_calls: int = 8,
        lenient: bool = True,
        write_prompt: str = prompts.WRITE_SYSTEM_PROMPT,
        read_prompt: str = prompts.READ_SYSTEM_PROMPT,
        write_examples: Sequence[tuple[str, str]] = prompts.WRITE_EXAMPLES,
        read_examples: Sequence[tuple[str, str]] = prompts.READ_EXAMPLES,
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
        check_type(store, TripletStore, "store must be a TripletStore")
        self.max_rounds = check_positive_int(max_rounds, "max_rounds")
        self.max_calls = check_positive_int(max_calls, "max_calls")
        self.max_tokens = check_positive_int(max_tokens, "max_tokens")
        self.max_reply_chars = check_positive_int(max_reply_chars, "max_reply_chars")
        self.max_term_chars = check_positive_int(max_term_chars, "max_term_chars")
        self.store = store
        self.namespace = namespace_tuple(namespace)
        self.lenient = lenient
        self.write_prompt = write_prompt
        self.read_prompt = read_prompt
        self.write_examples = prompts.check_examples(write_examples, "write_examples")
        self.read_examples = prompts.check_examples(read_examples, "read_examples")
        self.temperature = temperature
        self.extractive_fallback = bool(extractive_fallback)
        flags = {"constrained": constrained, "constrained_reads": constrained_reads, "relax_reads": relax_reads}
        for name, flag in flags.items():
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be True or False, got {flag!r}")
        self.constrained = constrained
        self.constrained_reads = constrained_reads
        self.relax_reads = relax_reads
        # the reply formats, for models that enforce them ({} otherwise: free text, parsed as before)
        self._wf = format_kwargs(self.model, prompts.WRITE_FORMAT) if constrained else {}
        self._rf = format_kwargs(self.model, prompts.READ_FORMAT) if constrained_reads else {}

    # ------------------------------------------------------------------------------------------ shared steps
    def _capped(self, reply: object) -> str:
        """The part of a model reply that is parsed: at most ``max_reply_chars`` characters."""
        if not isinstance(reply, str):
            raise TypeError(
                f"the chat model {type(self.model).__name__} returned {type(reply).__name__}, expected str; "
                "check that it returns the reply text"
            )
        if len(reply) > self.max_reply_chars:
            logger.warning("model reply of %d characters cut to max_reply_chars=%d", len(reply), self.max_reply_chars)
            return reply[: self.max_reply_chars]
        return reply

    def _store(self, triplets: Sequence[tuple[Triplet, int]], skipped: list[SkippedCall]) -> list[TripletRecord]:
        """Store the triplets in one transaction; if the store rejects the batch (ValueError/TypeError), store
        each alone and add the rejected ones to ``skipped``. Other errors (a closed or locked store) propagate."""
        writes = [TripletWrite(t, namespace=self.namespace) for t, _ in triplets]
        try:
            return self.store.write_many(writes) if writes else []
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

    def execute(self, text: str, *, allow_writes: bool = True) -> tuple[str, _Reads]:
        """Run the calls in ``text``: writes (if allowed) are stored, reads are answered.

        Returns the text up to the last executed call, with every read replaced by its answered form, and
        the executed reads with their records. Only the first ``max_reply_chars`` characters are parsed;
        malformed calls and writes the store rejects are skipped (and logged).
        """
        text = self._capped(text)
        calls, skipped = scan_calls(text, max_term_chars=self.max_term_chars)
        calls = calls[: self.max_calls]
        out: list[str] = []
        reads: _Reads = []
        pos = 0
        writes: list[tuple[Triplet, int]] = []
        for call in calls:
            out.append(text[pos : call.start])
            pos = call.end
            if call.kind == "read":
                records = self._read(call.fields)
                reads.append((call, records))
                out.append(render_read(call.fields, [r.triplet for r in records]))
            else:
                out.append(text[call.start : call.end])
                if allow_writes:
                    writes.append((call.triplet, call.start))
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

    def _result(self, reply: str, reads: _Reads, messages: list[dict[str, str]], rounds: int) -> AnswerResult:
        """The answer: the reply without memory calls (malformed ones too); if the model wrote nothing else
        (small models often just repeat the call) and ``extractive_fallback`` is on, the facts read, as sentences."""
        text = " ".join(_BROKEN_CALL.sub(" ", strip_calls(self._capped(reply))).split())
        fallback = not text and self.extractive_fallback and any(recs for _, recs in reads)
        if fallback:
            text = _facts(reads, escape=False).replace("\n", " ")
        return AnswerResult(text, reads, [*messages, {"role": "assistant", "content": reply}], rounds, fallback)

    # ------------------------------------------------------------------------------------------ workflows
    def _chat(self, messages: list[dict[str, str]], reply_format: dict[str, Any]) -> ChatStep:
        options = {"temperature": self.temperature, "max_tokens": self.max_tokens, **reply_format}
        return ChatStep(self.model, messages, options)

    def _memorize_steps(self, statement: str) -> Steps[MemorizeResult]:
        messages = _request("statement", statement, self.write_prompt, self.write_examples)
        reply = yield self._chat(messages, self._wf)
        text = self._capped(reply)
        found, skipped = scan_calls(text, max_term_chars=self.max_term_chars)
        calls = [c for c in found if c.kind == "write"][: self.max_calls]
        triplets = [(c.triplet, c.start) for c in calls]
        if not triplets and self.lenient:
            loose, loose_skipped = lenient_scan(text, self.max_term_chars)
            triplets = loose[: self.max_calls]
            skipped += loose_skipped
        records = (yield CallStep(self._store, (triplets, skipped))) if triplets else []
        return MemorizeResult(records, reply, calls, skipped)

    def _answer_steps(self, question: str, allow_writes: bool) -> Steps[AnswerResult]:
        messages = _request("question", question, self.read_prompt, self.read_examples)
        all_reads: _Reads = []
        for round_no in range(1, self.max_rounds + 1):
            reply = yield self._chat(messages, self._rf)
            executed, reads = yield CallStep(self.execute, (reply,), {"allow_writes": allow_writes})
            if not reads:
                return self._result(reply, all_reads, messages, round_no)
            repeated = {c.fields for c, _ in reads} <= {c.fields for c, _ in all_reads}
            all_reads += reads
            follow_up = prompts.FOLLOW_UP_TEMPLATE.format(facts=_facts(reads) or "(nothing found)", question=question)
            messages += [{"role": "assistant", "content": executed}, {"role": "user", "content": follow_up}]
            if repeated:
                break
        reply = yield self._chat(messages, self._rf)
        return self._result(reply, all_reads, messages, round_no + 1)

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


def _request(name: str, text: str, system: str, examples: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    """The messages asking for the calls about one statement or question (``name``), after the few-shot turns."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{name} must be a non-empty string")
    return prompts.with_examples(system, examples, f"{name.capitalize()}: {text}")


def _facts(reads: _Reads, *, escape: bool = True) -> str:
    """The distinct triplets read, oldest first (by ``valid_from``, then write order), one plain sentence per
    line; terms escaped so none can form a call."""
    records = sorted((r for _, records in reads for r in records), key=lambda r: (r.valid_from, r.id))
    fmt = escape_term if escape else str
    return "\n".join(" ".join(fmt(t) for t in trip) + "." for trip in dict.fromkeys(r.triplet for r in records))


def _rejected(item: tuple[Triplet, int], exc: Exception) -> SkippedCall:
    trip, start = item
    return SkippedCall(start, " >> ".join(trip)[:200], f"the store rejected the write: {exc}")
