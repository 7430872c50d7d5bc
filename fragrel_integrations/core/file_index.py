"""The index of one text file as the ``fragrel`` command builds it: the embedder its options name, and the
on-disk cache.

A cache file is keyed by a SHA-256 of the file's bytes, the embedder's id and input window, and the splitting. The
hybrid score with a relation that reads no embeddings embeds only the ``dense_candidates`` fragments BM25 ranks
best per query and keeps their vectors in a ``.vectors`` file; otherwise the whole index is kept in a ``.fragrel``
file. A damaged or stale cache file is rebuilt (one logged warning); any other file there is reported and left
alone. The keywords are the command's options, and errors name them so.

>>> from fragrel_integrations.core import ContextRelation
>>> text = "the cat sat down. the dog ran off."
>>> index = file_index("pets.txt", text.encode(), text, relation=ContextRelation(0.3), alpha=0.5,
...                    fragment_words=4, scorer="bm25")
>>> index.retrieve("dog", k=1)[0].fragment.text
'the dog ran off.'
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._cache_dir import default_cache_dir
from ..models.embedder import Embedder
from .embedder_identity import embedder_id, embedder_identity
from .index import FragRelIndex
from .relations import Relation
from .saved_index import VERSION, file_sha256, is_index_file
from .splitters import split_words
from .staged import DEFAULT_CANDIDATES, StagedHybridScorer, WindowVectorFile
from .windows import embedder_window_tokens

__all__ = ["CACHE_LAYOUT", "SERVED_TIMEOUT", "SERVED_WINDOW_TOKENS", "file_index"]

logger = logging.getLogger(__name__)

#: Bumped when what the cache key covers changes, so that older cache files are never reused (2: the key holds
#: the embedder's input window and the file records the embedder's whole identity).
CACHE_LAYOUT = 2

#: Input window assumed for a served embedding model (``embed_base_url``), which does not say its own: what
#: BERT-family embedders (e5, bge, gte) read; raise it with ``embed_window_tokens`` for longer-context models.
SERVED_WINDOW_TOKENS = 512

#: Seconds each request to ``embed_base_url`` may take (retries included) by default.
SERVED_TIMEOUT = 60.0


def file_index(
    path: str,
    data: bytes,
    text: str,
    *,
    relation: Relation,
    alpha: float,
    fragment_words: int,
    scorer: str = "hybrid",
    top_m: int | None = None,
    window_words: int | None = None,
    dense_candidates: int = DEFAULT_CANDIDATES,
    embed_model: str | None = None,
    embed_base_url: str | None = None,
    embed_api_key: str | None = None,
    embed_window_tokens: int | None = None,
    timeout: float = SERVED_TIMEOUT,
    cache: bool = True,
    cache_dir: str | Path | None = None,
    show_progress: bool = True,
    report: Callable[[str], None] = logger.warning,
) -> FragRelIndex:
    """The index over ``text``, the file at ``path`` whose bytes are ``data``; embeddings come from the cache in
    ``cache_dir`` (None: ``$XDG_CACHE_HOME/fragrel``) unless ``cache`` is False. ``window_words`` None: what the
    embedder reads. ``report`` receives the line about a cache file left alone or not written."""
    name = Path(path).name
    window_words = "auto" if window_words is None else window_words
    needs_embeddings = scorer in ("dense", "hybrid") or relation.needs_embeddings
    embedder = None
    if not embed_model:
        named = {"--embed-base-url": embed_base_url, "--embed-api-key": embed_api_key}
        named["--embed-window-tokens"] = embed_window_tokens
        for option, value in named.items():
            if value is not None:
                raise ValueError(f"{option} needs --embed-model (a model folder, or the name the server serves)")
    elif needs_embeddings:  # BM25 alone reads no embeddings: an embed_model folder is not loaded
        embedder = _user_embedder(embed_model, embed_base_url, embed_api_key, embed_window_tokens, timeout)
    if dense_candidates < 0:
        raise ValueError(f"--dense-candidates must be >= 0 (0: embed the whole file), got {dense_candidates}")
    kwargs: dict[str, Any] = dict(relation=relation, alpha=alpha, scorer=scorer, top_m=top_m, embedder=embedder)

    def build() -> FragRelIndex:
        return FragRelIndex.from_texts(
            [text],
            doc_ids=[name],
            fragment_words=fragment_words,
            window_words=window_words,
            show_progress=show_progress,
            **kwargs,
        )

    if not needs_embeddings:  # BM25 alone: no embedder is loaded, nothing is cached
        return build()
    from ..models import local

    active = embedder or local.default_embedder()  # loaded here: embedding the question needs it anyway
    key_fields = {
        "file_sha256": file_sha256(data),
        "model": local.default_embedder_id() if embedder is None else embedder_id(embedder),
        "format": VERSION,
        "layout": CACHE_LAYOUT,
        "fragment_words": fragment_words,
        "window_words": window_words,  # "auto": resolved from the embedder's window, which the key holds too
        "embed_window_tokens": embedder_window_tokens(active),
    }
    key = file_sha256(json.dumps(key_fields, sort_keys=True).encode("utf-8"))
    stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in Path(path).stem)[:40]
    folder = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    cache_file = folder / f"{stem}-{key[:32]}.fragrel"
    if scorer == "hybrid" and not relation.needs_embeddings and dense_candidates:
        # the vectors of BM25's best fragments per query, kept in a file recording the embedder's identity
        fragments = [f for f in split_words(text, fragment_words=fragment_words, doc_id=name) if f.text]
        if not fragments:
            raise ValueError(f"{path} holds no words")
        texts = [f.text for f in fragments]
        options = {"candidates": dense_candidates, "window_words": window_words, "embedder": active}
        staged = None
        if cache:
            try:
                identity = embedder_identity(active)  # one probe embedding: the model behind the name
                store = WindowVectorFile(
                    cache_file.with_suffix(".vectors"), key=key, n_fragments=len(texts), identity=identity, rebuild=True
                )
                staged = StagedHybridScorer(texts, store=store, **options)
            except ValueError as exc:
                report(f"ignoring the cache file ({exc}); delete it to cache again")
        if staged is None:
            staged = StagedHybridScorer(texts, **options)
        return FragRelIndex(fragments, **{**kwargs, "scorer": staged}, show_progress=False)
    if not cache:
        return build()
    if cache_file.is_file():
        try:
            return FragRelIndex.load(cache_file, expect={"cache_key": key}, **kwargs)
        except ValueError as exc:
            if not is_index_file(cache_file):
                report(f"ignoring the cache file ({exc}); delete it to cache again")
                return build()
            logger.warning("rebuilding the cache file %s: %s", cache_file, exc)
    index = build()
    try:
        index.save(cache_file, metadata={"cache_key": key, **key_fields, "source": name})
    except (OSError, ValueError) as exc:
        report(f"could not write the cache ({exc}); use --no-cache or --cache-dir")
    return index


def _user_embedder(
    model: str, base_url: str | None, api_key: str | None, window_tokens: int | None, timeout: float
) -> Embedder:
    """The embedder ``--embed-model`` names: served at ``base_url``, else a sentence-transformers folder."""
    if window_tokens is not None and window_tokens < 1:
        raise ValueError(f"--embed-window-tokens must be >= 1 (tokens the model reads), got {window_tokens}")
    if base_url:
        from ..models.openai_embeddings import OpenAIEmbedder

        window = SERVED_WINDOW_TOKENS if window_tokens is None else window_tokens
        return OpenAIEmbedder(model, base_url=base_url, api_key=api_key, max_input_tokens=window, timeout=timeout)
    if api_key is not None or window_tokens is not None:
        raise ValueError("--embed-api-key and --embed-window-tokens are for a served model: add --embed-base-url URL")
    folder = Path(model).expanduser()
    if not folder.is_dir():
        raise ValueError(
            f"--embed-model {model}: no such folder (a sentence-transformers model on disk); for a model "
            "served over HTTP add --embed-base-url URL (https://api.openai.com/v1 for OpenAI)"
        )
    from ..models.local import MiniLMEmbedder

    return MiniLMEmbedder(model_path=folder)
