"""A chat GGUF model run in-process by llama-cpp-python (extra ``[llamacpp]``), with GBNF grammars for every
:class:`~.structured.ReplyFormat`; ``model_path=None`` is the embedded SmolLM2. Loaded by :func:`portable_loading`.

>>> model = LlamaCppChatModel()                                                # doctest: +SKIP
>>> model.invoke([{"role": "user", "content": "What is the capital of France?"}], max_tokens=16)  # doctest: +SKIP
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
from .._validation import check_type
from .chat import Messages, to_messages
from .structured import ReplyFormat
from .transformers_chat import InProcessChatModel, smollm2_gguf_path

__all__ = ["LlamaCppChatModel", "check_gbnf", "choice_gbnf", "gbnf", "gbnf_literal", "portable_loading"]

logger = logging.getLogger(__name__)

_LOADING = threading.Lock()


@contextlib.contextmanager
def portable_loading() -> Iterator[None]:
    """Models loaded inside keep weights in plain CPU buffers: AMX-repacked ones fault where AMX is not allowed."""
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


class LlamaCppChatModel(InProcessChatModel):
    """A chat GGUF model on llama-cpp-python with its chat template (or ``chat_format``); ``n_ctx`` is the window,
    ``timeout`` (seconds) raises ``TimeoutError``; calls on one instance are serialised."""

    _window_fix = "load with a larger n_ctx"

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
        window = ("n_ctx", n_ctx)
        super().__init__(path, window, seed, timeout, default_max_tokens, repeat_penalty, model_name, n_threads)
        self._llama_cpp = llama_cpp
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
        # freed while the interpreter is whole: llama-cpp-python's __del__ fails at shutdown
        self._finalizer = weakref.finalize(self, self._llm.close)
        self._formatter = self._make_formatter()
        self._grammars: dict[ReplyFormat, Any] = {}
        self._grammar_lock = threading.Lock()
        logger.info("loaded %s in %.2fs (n_ctx=%d)", path.name, self.load_seconds, n_ctx)

    @property
    def context_window(self) -> int:  # type: ignore[override]
        return int(self._llm.n_ctx())

    @property
    def trained_context_window(self) -> int | None:
        return next((int(v) for k, v in self._llm.metadata.items() if k.endswith(".context_length")), None)

    def _make_formatter(self) -> Any:
        template = self._llm.metadata.get("tokenizer.chat_template")
        if not template:
            return None
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        def token_text(key: str) -> str:
            tid = self._llm.metadata.get(key)
            return "" if tid is None else self._llm.detokenize([int(tid)], special=True).decode("utf-8", "ignore")

        return Jinja2ChatFormatter(
            template=template,
            eos_token=token_text("tokenizer.ggml.eos_token_id"),
            bos_token=token_text("tokenizer.ggml.bos_token_id"),
        )

    def _encode(self, text: str) -> list[int]:
        with self._lock:
            return list(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def count_message_tokens(self, messages: Messages) -> int:
        """Exact prompt tokens of a chat request (the chat template applied)."""
        msgs = to_messages(messages)
        if self._formatter is None:
            from .tokens import MESSAGE_OVERHEAD_TOKENS

            return sum(self.count_tokens(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in msgs)
        prompt = self._formatter(messages=msgs).prompt
        with self._lock:
            return len(self._llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True))

    def _stream(self, messages, temperature, max_tokens, stop, reply_format=None) -> Iterator[str]:  # type: ignore[no-untyped-def]
        budget = self._budget(self.count_message_tokens(messages), max_tokens)
        grammar = None if reply_format is None else self._grammar(reply_format)
        with self._lock:
            end = self._deadline()
            stream = self._llm.create_chat_completion(
                messages,
                temperature=0.0 if temperature is None else temperature,
                max_tokens=budget,
                stop=stop or [],
                seed=self.seed,
                repeat_penalty=self.repeat_penalty,
                grammar=grammar,
                stream=True,
            )
            try:
                for chunk in stream:
                    piece = chunk["choices"][0]["delta"].get("content") or ""
                    if not self._past(end) and piece:
                        yield piece
            finally:
                stream.close()

    def _first_logits(self, messages: list[dict[str, str]]) -> Any:
        """The prompt evaluated, its cached prefix reused."""
        import numpy as np

        if self._formatter is None:
            raise NotImplementedError(
                f"{self.model_path.name} has no chat template in its GGUF metadata: yes_no_probability needs one"
            )
        prompt = self._formatter(messages=messages).prompt
        llm = self._llm
        with self._lock:
            ids = llm.tokenize(prompt.encode("utf-8"), special=True)
            self._budget(len(ids), None)
            llm.n_tokens = min(llm.longest_token_prefix(llm.input_ids[: llm.n_tokens], ids), len(ids) - 1)
            llm.eval(ids[llm.n_tokens :])
            logits = np.ctypeslib.as_array(self._llama_cpp.llama_get_logits(llm.ctx), shape=(llm.n_vocab(),))
            return logits.astype(np.float64)

    def _free(self) -> None:
        self._finalizer()

    def supports_format(self, reply_format: ReplyFormat) -> bool:
        """Every kind by a grammar; False for a regex or schema the converter cannot translate."""
        return self._grammar(reply_format) is not None

    def _grammar(self, reply_format: ReplyFormat) -> Any:
        """The compiled grammar of a format (cached), or None when llama.cpp cannot use it."""
        with self._grammar_lock:
            if reply_format in self._grammars:
                return self._grammars[reply_format]
            try:
                text = gbnf(reply_format)
                with self._lock:
                    lib = self._llama_cpp.llama_cpp
                    check_gbnf(lib, lib.llama_model_get_vocab(self._llm.model), text)
                grammar = self._llama_cpp.LlamaGrammar.from_string(text, verbose=False)
            except ValueError as exc:
                logger.warning("%s: the reply is not constrained (%s)", self.model_name, exc)
                grammar = None
            if len(self._grammars) >= 64:
                self._grammars.clear()
            self._grammars[reply_format] = grammar
            return grammar


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
    """The GBNF grammar that enforces ``reply_format``; ValueError when the converter cannot translate it."""
    check_type(reply_format, ReplyFormat, "reply_format must be a ReplyFormat")
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
    except Exception as exc:  # the converter raises assorted errors
        raise ValueError(
            f"llama.cpp cannot translate this {reply_format.kind} format to a grammar ({type(exc).__name__}: {exc}); "
            "simplify it or pass ReplyFormat.grammar(...) with hand-written GBNF"
        ) from exc


def check_gbnf(llama_cpp_lib: Any, vocab: Any, text: str) -> None:
    """ValueError unless llama.cpp's parser compiles ``text`` (unchecked, a bad grammar ends the process later)."""
    sampler = llama_cpp_lib.llama_sampler_init_grammar(vocab, text.encode("utf-8"), b"root")
    if not sampler:
        raise ValueError(
            "llama.cpp cannot parse this GBNF grammar (its parser's message is on stderr); check the rules"
        )
    llama_cpp_lib.llama_sampler_free(sampler)
