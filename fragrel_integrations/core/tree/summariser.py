"""Summary-and-surprise calls for many texts: content-hash cache, bounded concurrency, a progress bar, and a
fallback that never lets a failed call stop the caller (or put an error message into a summary).

>>> from fragrel_integrations.testing import ScriptedChatModel
>>> s = Summariser(ScriptedChatModel(lambda m: "(Summary): Short.\\n(Surprise): Odd."), show_progress=False)
>>> results, report = s.summarise(["A long text.", "A long text."])
>>> results[0].summary, results[0].surprise, report.llm_calls, report.cache_hits
('Short.', 'Odd.', 1, 1)
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any

from tqdm.auto import tqdm

from ..._validation import check_positive_int
from ...models.chat import ChatModel, ChatModelBase, abatch, batch, context_window, model_id
from ...models.convert import as_chat_model
from ...models.structured import ReplyFormat, format_kwargs
from ...models.tokens import count_message_tokens, count_tokens
from ..token_budget import OUTPUT_CHARS_PER_TOKEN, cap_output, storable_text, truncate_to_tokens
from .summary import PROMPT_VERSION, ParsedSummary, parse_summary, summary_format, summary_messages

__all__ = ["BuildReport", "Summariser", "SummaryResult"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SummaryResult:
    """One summary call's outcome (what the summary cache stores, except failures, which are retried)."""

    summary: str
    surprise: str
    parsed: bool
    failed: bool = False


@dataclass(slots=True)
class BuildReport:
    """Counts from a build or insert: model calls made, cache hits, replies the parser could not split, calls
    that failed, nodes added and summaries rewritten."""

    llm_calls: int = 0
    cache_hits: int = 0
    parse_failures: int = 0
    call_failures: int = 0
    nodes_added: int = 0
    nodes_resummarised: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, other: BuildReport) -> None:
        """Accumulate ``other`` into this report."""
        for f in fields(self):
            if f.name == "errors":
                self.errors.extend(other.errors)
            else:
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


#: What a summariser returns: one result per input, and what the call cost.
_Results = tuple[list[SummaryResult], BuildReport]


class _Guarded(ChatModelBase):
    """Wraps the model for one batch: never raises (errors are recorded by request) and ticks a progress bar."""

    def __init__(self, model: ChatModel, bar: tqdm, reply_format: ReplyFormat | None = None) -> None:
        self.model = model
        self.model_name = model_id(model)
        self.bar = bar
        self.errors: dict[str, BaseException] = {}
        self.extra = format_kwargs(model, reply_format)  # the reply format, for models that enforce it

    @staticmethod
    def key(messages: Sequence[Mapping[str, str]]) -> str:
        return json.dumps([dict(m) for m in messages], sort_keys=True)

    @contextmanager
    def _call(self, messages: Sequence[Mapping[str, str]]) -> Iterator[None]:
        """Record an error of the call inside (one failed call must not stop the build) and tick the bar."""
        try:
            yield
        except Exception as exc:
            self.errors[self.key(messages)] = exc
        finally:
            self.bar.update(1)

    def _generate(self, messages, temperature, max_tokens, stop) -> str:  # type: ignore[no-untyped-def]
        with self._call(messages):
            return self.model.invoke(messages, temperature=temperature, max_tokens=max_tokens, stop=stop, **self.extra)
        return ""

    async def _agenerate(self, messages, temperature, max_tokens, stop) -> str:  # type: ignore[no-untyped-def]
        with self._call(messages):
            options = {"temperature": temperature, "max_tokens": max_tokens, "stop": stop}
            return await self.model.ainvoke(messages, **options, **self.extra)
        return ""


class Summariser:
    """Runs the summary prompt of :mod:`.summary` over texts with ``chat_model``.

    Replies are parsed with :func:`~.summary.parse_summary` and cached by a SHA-256 of the model id, the prompt
    version and the full request (``cache`` is a plain dict, so a tree can save it). A call that raises or returns
    nothing (or not a str) is counted in the report and replaced by the start of its input (not cached, so it is
    retried next time). Inputs longer than the model's context window allows are cut. Generation is greedy
    (temperature 0). Model output is capped before it is parsed or stored, for a model that ignores
    ``max_tokens``: the summary to :data:`~fragrel_integrations.core.token_budget.OUTPUT_CHARS_PER_TOKEN` characters
    per token of ``summary_tokens``, the surprise per token of ``surprise_tokens`` (16 x 300 = 4,800 and
    16 x 150 = 2,400 characters by default).

    With ``constrained=True`` (the default) a model that enforces reply formats (the embedded llama.cpp model,
    OpenAI-compatible servers) writes under :func:`~.summary.summary_format`, so every reply has both sections;
    other models are called as before and parsed leniently. The format is part of the cache key when enforced.
    """

    def __init__(
        self,
        chat_model: Any,
        *,
        summary_tokens: int = 300,
        surprise_tokens: int = 150,
        max_concurrency: int = 4,
        show_progress: bool = True,
        counter: Callable[[str], int] | None = None,
        cache: dict[str, SummaryResult] | None = None,
        constrained: bool = True,
    ) -> None:
        self.chat_model: ChatModel | None = None if chat_model is None else as_chat_model(chat_model)
        self.summary_tokens = check_positive_int(summary_tokens, "summary_tokens")
        self.surprise_tokens = check_positive_int(surprise_tokens, "surprise_tokens")
        self.max_concurrency = check_positive_int(max_concurrency, "max_concurrency")
        self.show_progress = show_progress
        self.count: Callable[[str], int] = counter or (lambda text: count_tokens(self.chat_model, text))
        self.cache: dict[str, SummaryResult] = {} if cache is None else cache
        if not isinstance(constrained, bool):
            raise TypeError(f"constrained must be True or False, got {constrained!r}")
        self.constrained = constrained
        self.reply_format = summary_format(summary_tokens, surprise_tokens) if constrained else None

    def _input_budget(self) -> int | None:
        window = context_window(self.chat_model)
        if window is None:
            return None
        overhead = count_message_tokens(self.chat_model, summary_messages("", self.summary_tokens))
        return max(16, window - overhead - self.summary_tokens - self.surprise_tokens - 16)

    def _requests(self, inputs: list[str]) -> list[list[dict[str, str]]]:
        budget = self._input_budget()
        out = []
        for text in inputs:
            if budget is not None and self.count(text) > budget:
                text = truncate_to_tokens(text, budget, self.count)
            out.append(summary_messages(text, self.summary_tokens))
        return out

    def _cache_key(self, messages: list[dict[str, str]]) -> str:
        payload: list[Any] = [PROMPT_VERSION, model_id(self.chat_model), messages, self.summary_tokens]
        if format_kwargs(self.chat_model, self.reply_format):  # an enforced layout gives other replies
            payload.append(self.reply_format.spec)  # type: ignore[union-attr]
        blob = json.dumps(payload, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def _fallback(self, text: str) -> str:
        return truncate_to_tokens(" ".join(text.split()), self.summary_tokens, self.count)

    def _pending(self, inputs: list[str]) -> tuple[list[list[dict[str, str]]], list[str], list[int]]:
        if self.chat_model is None:
            raise ValueError("no chat model to write summaries: pass chat_model=... (needed to build or insert)")
        requests = self._requests(inputs)
        keys = [self._cache_key(r) for r in requests]
        todo = [i for i, k in enumerate(keys) if k not in self.cache]
        first: dict[str, int] = {}
        for i in todo:  # one call per distinct request
            first.setdefault(keys[i], i)
        return requests, keys, sorted(first.values())

    def _parse(self, reply: str) -> ParsedSummary:
        """Parse a reply with its sections capped: the summary to ``OUTPUT_CHARS_PER_TOKEN * summary_tokens``
        characters, the surprise to ``OUTPUT_CHARS_PER_TOKEN * surprise_tokens`` (lone surrogates, which no file
        accepts, become U+FFFD)."""
        longest = OUTPUT_CHARS_PER_TOKEN * max(self.summary_tokens, self.surprise_tokens) + 1
        parsed = parse_summary(reply, max_section_chars=longest)
        summary, _ = cap_output(storable_text(parsed.summary), self.summary_tokens)
        surprise, _ = cap_output(storable_text(parsed.surprise), self.surprise_tokens)
        return ParsedSummary(summary, surprise, parsed.ok)

    def _finish(
        self, inputs: list[str], requests: list, keys: list[str], todo: list[int], outputs: list, guard: _Guarded
    ) -> _Results:
        report = BuildReport(cache_hits=len(inputs) - len(todo), llm_calls=len(todo))
        fresh: dict[str, SummaryResult] = {}
        for i, out in zip(todo, outputs, strict=True):
            error = guard.errors.get(_Guarded.key(requests[i]))
            if error is None and not isinstance(out, str):
                error = TypeError(f"the chat model returned {type(out).__name__}; its invoke/ainvoke must return str")
            parsed = self._parse(out) if error is None else ParsedSummary("", "", False)
            if error is not None or not parsed.summary:
                report.call_failures += 1
                why = f"{type(error).__name__}: {error}" if error is not None else "empty reply"
                report.errors.append(f"summary call failed ({why}); kept the start of the input instead")
                logger.warning("a summary call failed (%s); using the input's start", why)
                fresh[keys[i]] = SummaryResult(self._fallback(inputs[i]), "", False, True)
                continue
            if not parsed.ok:
                report.parse_failures += 1
            result = SummaryResult(parsed.summary, parsed.surprise, parsed.ok)
            fresh[keys[i]] = result
            self.cache[keys[i]] = result
        return [fresh.get(k) or self.cache[k] for k in keys], report

    @contextmanager
    def _calls(self, inputs: Sequence[str]) -> Iterator[tuple[_Guarded, list, Callable[[list], _Results]]]:
        """The model calls ``inputs`` still need (guarded, with a progress bar open over them) and the function
        that turns their replies, in order, into the results and report."""
        inputs = list(inputs)
        requests, keys, todo = self._pending(inputs)
        hide = not self.show_progress or not todo
        with tqdm(total=len(todo), desc="summarising", unit="call", disable=hide) as bar:
            guard = _Guarded(self.chat_model, bar, self.reply_format)  # type: ignore[arg-type]
            yield guard, [requests[i] for i in todo], lambda out: self._finish(inputs, requests, keys, todo, out, guard)

    @property
    def _call_options(self) -> dict[str, Any]:
        """Greedy generation capped at both budgets, at most ``max_concurrency`` calls in flight."""
        max_tokens = self.summary_tokens + self.surprise_tokens
        return {"max_concurrency": self.max_concurrency, "temperature": 0.0, "max_tokens": max_tokens}

    def summarise(self, inputs: Sequence[str]) -> _Results:
        """One result per input (in order) and what it cost; calls run in a thread pool (safe in an event loop)."""
        with self._calls(inputs) as (guard, requests, finish):
            return finish(batch(guard, requests, **self._call_options))

    async def asummarise(self, inputs: Sequence[str]) -> _Results:
        """Async :meth:`summarise`: ``ainvoke`` calls, at most ``max_concurrency`` in flight."""
        with self._calls(inputs) as (guard, requests, finish):
            return finish(await abatch(guard, requests, **self._call_options))
