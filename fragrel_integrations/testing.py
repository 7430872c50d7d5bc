"""Deterministic stand-ins for unit tests (yours and ours): a scripted chat model and a hashed bag-of-words embedder.

Neither loads a model or touches the network. The embedder's vectors carry real signal (texts that share content
words are close, unrelated texts are near-orthogonal), so clustering and retrieval tests built on it are meaningful.

>>> emb = HashingEmbedder(dim=256)
>>> v = emb.embed_documents(["the cat sat on the mat", "a cat on a mat", "stock markets fell sharply"])
>>> bool(v[0] @ v[1] > 0.5 > v[0] @ v[2])
True
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import math
import re
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence

import numpy as np

from ._validation import check_min_int, check_type
from .models.chat import ChatModelBase
from .models.tokens import estimate_tokens

__all__ = ["DEFAULT_STOPWORDS", "HashingEmbedder", "ScriptedChatModel"]

Responder = Callable[[list[dict[str, str]]], str]


class ScriptedChatModel(ChatModelBase):
    """A chat model that replies from a script: a list (used in order) or a function of the messages.

    A list item that is an exception instance is raised instead of returned (to test retries). Replies honour
    ``stop`` (cut at the first stop string) and ``max_tokens`` (cut to that many words), like a real model.
    ``calls`` records every request; ``delay`` seconds are slept per call (``asyncio.sleep`` in ``ainvoke``), and
    ``max_in_flight`` records the peak number of concurrent calls.

    >>> model = ScriptedChatModel(["Hello there. Bye.", ValueError("boom")])
    >>> model.invoke("Hi", stop=["."])
    'Hello there'
    >>> model.calls[0]["messages"]
    [{'role': 'user', 'content': 'Hi'}]
    """

    def __init__(
        self,
        responses: Sequence[str | BaseException] | Responder,
        *,
        cycle: bool = False,
        delay: float = 0.0,
        model_name: str = "scripted",
        context_window: int | None = None,
    ) -> None:
        if callable(responses):
            self._responder: Responder | None = responses
            self._script: list[str | BaseException] = []
        elif isinstance(responses, str) or not isinstance(responses, Sequence):
            raise TypeError("responses must be a list of replies (str or exception) or a function of the messages")
        else:
            self._responder = None
            self._script = list(responses)
            bad = [r for r in self._script if not isinstance(r, str | BaseException)]
            if bad:
                raise TypeError(f"every scripted response must be a str or an exception instance, got {bad[0]!r}")
        if delay < 0:
            raise ValueError(f"delay must be >= 0 seconds, got {delay!r}")
        self.cycle = cycle
        self.delay = delay
        self.model_name = model_name
        self.context_window = context_window
        self.calls: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()

    def count_tokens(self, text: str) -> int:
        return estimate_tokens(text)

    def _next(self, messages: list[dict[str, str]], temperature, max_tokens, stop) -> str:
        with self._lock:
            index = len(self.calls)
            self.calls.append(
                {"messages": messages, "temperature": temperature, "max_tokens": max_tokens, "stop": stop}
            )
        if self._responder is not None:
            reply = self._responder(messages)
            check_type(reply, str, "the responder function must return str")
        elif index >= len(self._script) and not (self.cycle and self._script):
            raise RuntimeError(
                f"ScriptedChatModel ran out of responses after {len(self._script)} calls; "
                "add more responses or pass cycle=True"
            )
        else:
            reply = self._script[index % len(self._script)]
        if isinstance(reply, BaseException):
            raise reply
        for s in stop or ():
            cut = reply.find(s)
            if cut >= 0:
                reply = reply[:cut]
        if max_tokens is not None:
            reply = " ".join(reply.split(" ")[:max_tokens])
        return reply

    @contextlib.contextmanager
    def _call(self) -> Iterator[None]:
        """Count the call as in flight while it runs (``in_flight``, ``max_in_flight``)."""
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            yield
        finally:
            with self._lock:
                self.in_flight -= 1

    def _generate(self, messages, temperature, max_tokens, stop) -> str:
        with self._call():
            if self.delay:
                time.sleep(self.delay)
            return self._next(messages, temperature, max_tokens, stop)

    async def _agenerate(self, messages, temperature, max_tokens, stop) -> str:
        with self._call():
            if self.delay:
                await asyncio.sleep(self.delay)
            return self._next(messages, temperature, max_tokens, stop)

    def _stream(self, messages, temperature, max_tokens, stop) -> Iterator[str]:
        """The scripted reply one word (with its following spaces) at a time, like a streaming model."""
        yield from _SPLIT_WORDS.findall(self._generate(messages, temperature, max_tokens, stop))

    async def _astream(self, messages, temperature, max_tokens, stop) -> AsyncIterator[str]:
        for piece in _SPLIT_WORDS.findall(await self._agenerate(messages, temperature, max_tokens, stop)):
            yield piece


_SPLIT_WORDS = re.compile(r"\s*\S+\s*|\s+")

_STOPWORDS = """
a an and are as at be but by did do does for from had has have he her him his i in is it its me my
no not of on or our she so than that the their them then there they this to was we were what when
where which who why will with you your
"""
DEFAULT_STOPWORDS = frozenset(_STOPWORDS.split())

_WORD = re.compile(r"\w+", re.UNICODE)


class HashingEmbedder:
    """Hashed bag-of-words vectors: each content word adds ``±(1 + log tf)`` to one of ``dim`` buckets chosen by a
    keyed BLAKE2b hash (``seed`` is the key), then the vector is L2-normalised. Implements the Embedder protocol.

    Lower-cased ``\\w+`` tokens minus ``stopwords``; with ``bigrams=True`` adjacent word pairs are added too. A text
    with no content word maps to one fixed unit vector (finite, never NaN).

    >>> HashingEmbedder(dim=64).embed_query("Hello world").shape
    (64,)
    """

    def __init__(
        self,
        dim: int = 256,
        *,
        seed: int = 0,
        stopwords: frozenset[str] = DEFAULT_STOPWORDS,
        bigrams: bool = False,
    ) -> None:
        self.dim = check_min_int(dim, "dim", 2)
        self.seed = int(seed)
        self.stopwords = frozenset(stopwords)
        self.bigrams = bigrams
        self._key = self.seed.to_bytes(8, "little", signed=True)

    def _bucket(self, token: str) -> tuple[int, float]:
        h = int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8, key=self._key).digest(), "little")
        return (h >> 1) % self.dim, (1.0 if h & 1 else -1.0)

    def tokens(self, text: str) -> list[str]:
        """The features of ``text`` (content words, plus bigrams if enabled)."""
        words = [w for w in _WORD.findall(text.lower()) if w not in self.stopwords]
        if self.bigrams:
            words += [f"{a} {b}" for a, b in itertools.pairwise(words)]
        return words

    def _vector(self, text: str) -> np.ndarray:
        check_type(text, str, "texts must be str")
        v = np.zeros(self.dim, dtype=np.float64)
        counts = Counter(self.tokens(text)) or Counter({"\x00empty": 1})
        for tok, tf in counts.items():
            idx, sign = self._bucket(tok)
            v[idx] += sign * (1.0 + math.log(tf))
        norm = float(np.linalg.norm(v))
        if norm == 0.0:  # colliding features cancelled out exactly
            idx, sign = self._bucket("\x00empty")
            v[idx], norm = sign, 1.0
        return (v / norm).astype(np.float32)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([self._vector(t) for t in texts], dtype=np.float32).reshape(-1, self.dim)

    def embed_query(self, text: str) -> np.ndarray:
        return self._vector(text)

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self.dim}, seed={self.seed}, bigrams={self.bigrams})"
