"""A :class:`~fragrel_integrations.core.index.FragRelIndex` in one SQLite file, and the CLI's embedding cache.

The file is a :class:`~fragrel_integrations._sqlite.SavedFormat` (its header, atomic replace and damage rule):
the header holds the settings, the user's metadata and the embedder's identity; one row per fragment holds its
text, document, position, metadata as JSON and its sub-window embeddings as a float32 blob. No pickle: loading
a file never runs code from it.

>>> import tempfile
>>> from fragrel_integrations.core.index import FragRelIndex
>>> index = FragRelIndex.from_fragments(["a cat", "sat on", "the mat"], scorer="bm25")
>>> path = index.save(Path(tempfile.mkdtemp()) / "cats.fragrel")
>>> [h.fragment.text for h in FragRelIndex.load(path).retrieve("cat", k=1)]
['a cat']
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np

from .._sqlite import SavedFormat
from .._validation import stored_json
from ..models.embedder import Embedder
from .embedder_identity import check_identity, embedder_id, embedder_identity
from .fragments import Fragment, metadata_json
from .relations import CompositeRelation, ContextRelation, Relation, SemanticRelation
from .scorers import SCORER_NAMES, Scorer, ScorerName

IndexT = TypeVar("IndexT")  # FragRelIndex or a subclass (not imported here: index.py imports this module)

__all__ = [
    "FORMAT",
    "VERSION",
    "file_sha256",
    "is_index_file",
    "load_index",
    "relation_from_spec",
    "relation_spec",
    "save_index",
]

#: The header's ``format`` value: what makes a SQLite file a FragRel index.
FORMAT = "fragrel-index"
#: The newest layout this module writes and reads (bumped too when fragments are split or windowed differently,
#: so that the CLI's cache, keyed by it, never reuses embeddings made another way).
VERSION = 1

_FORMAT = SavedFormat(
    FORMAT,
    VERSION,
    "FragRel index",
    (
        "CREATE TABLE fragments (idx INTEGER PRIMARY KEY, doc_id TEXT NOT NULL, position INTEGER NOT NULL, "
        "text TEXT NOT NULL, metadata TEXT NOT NULL, n_windows INTEGER NOT NULL, vectors BLOB)",
    ),
    earlier=(("fragrel_index", "fragrel-index"),),
)
#: What :func:`save_index` reads of an index (a FragRelIndex has them all).
_INDEX_ATTRIBUTES = (
    "fragments",
    "embeddings",
    "window_embeddings",
    "window_offsets",
    "window_words",
    "alpha",
    "top_m",
    "scorer_name",
    "relation",
)
_SEMANTIC_FIELDS = ("top_m", "dense_limit", "default_top_m", "block_size")
_COUNTS = ("n_fragments", "dim", "n_windows")


# --------------------------------------------------------------------------------------------- relations


def relation_spec(relation: Relation) -> dict[str, Any] | None:
    """JSON description of a built-in relation (None for one that cannot be written down, e.g. a callable).

    >>> relation_spec(ContextRelation(0.5))
    {'type': 'context', 'w_rel': 0.5}
    """
    if type(relation) is ContextRelation:
        return {"type": "context", "w_rel": relation.w_rel}
    if type(relation) is SemanticRelation:
        return {"type": "semantic", **{f: getattr(relation, f) for f in _SEMANTIC_FIELDS}}
    if type(relation) is CompositeRelation:
        parts = [[relation_spec(r), float(w)] for r, w in relation.parts]
        return None if any(spec is None for spec, _ in parts) else {"type": "composite", "parts": parts}
    return None


def relation_from_spec(spec: object) -> Relation:
    """The relation :func:`relation_spec` described; ValueError for anything else.

    >>> relation_from_spec({"type": "context", "w_rel": 0.5})
    ContextRelation(w_rel=0.5)
    """
    if not isinstance(spec, dict):
        raise ValueError(f"relation must be a JSON object, got {spec!r}")
    kind = spec.get("type")
    try:
        if kind == "context":
            return ContextRelation(spec["w_rel"])
        if kind == "semantic":
            return SemanticRelation(**{f: spec[f] for f in _SEMANTIC_FIELDS})
        if kind == "composite":
            return CompositeRelation([(relation_from_spec(s), w) for s, w in spec["parts"]])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"bad {kind} relation {spec!r}: {exc}") from exc
    raise ValueError(f"unknown relation type {kind!r}")


# --------------------------------------------------------------------------------------------- save


def is_index_file(path: str | Path) -> bool:
    """Whether ``path`` is a FragRel index file, sound or damaged (its header names the format): a file that
    :func:`save_index` may replace.

    >>> import tempfile
    >>> is_index_file(Path(tempfile.mkdtemp()) / "absent.fragrel")
    False
    """
    return _FORMAT.owns(Path(path).expanduser())


def save_index(index: Any, path: str | Path, *, metadata: Mapping[str, Any] | None = None) -> Path:
    """Write ``index`` (a :class:`~fragrel_integrations.core.index.FragRelIndex`: anything with the attributes it
    reads) to the SQLite file ``path`` (replacing an older FragRel index there); returns the path.

    ``metadata`` (JSON-serialisable) is stored beside the settings; :func:`load_index` can require values
    in it (``expect=``). Raises ValueError for a path holding something else and TypeError for metadata that
    JSON cannot hold.
    """
    if not all(hasattr(index, name) for name in _INDEX_ATTRIBUTES):
        raise TypeError(f"save_index takes a FragRelIndex, got {type(index).__name__}")
    path = Path(path).expanduser()
    _FORMAT.check_target(path)
    metadata_json(metadata or {}, "index metadata")
    vectors, offsets = index.window_embeddings, index.window_offsets
    if vectors is None and index.embeddings is not None:
        vectors, offsets = index.embeddings, np.arange(len(index), dtype=np.int64)
    blocks = [None] * len(index) if vectors is None else np.split(np.asarray(vectors, dtype="<f4"), offsets[1:])
    rows = []
    for i, (f, block) in enumerate(zip(index.fragments, blocks, strict=True)):
        fmeta = metadata_json(f.metadata, f"fragment {i} ({f.doc_id}[{f.position}]) metadata", sort_keys=True)
        n_win, blob = (0, None) if block is None else (block.shape[0], block.tobytes())
        rows.append((i, f.doc_id, f.position, f.text, fmeta, n_win, blob))
    settings = {
        "n_fragments": len(index),
        "n_windows": 0 if vectors is None else int(vectors.shape[0]),
        "dim": 0 if vectors is None else int(vectors.shape[1]),
        "embedder": None if vectors is None else embedder_id(index.embedder),
        "window_words": index.window_words,
        "alpha": index.alpha,
        "top_m": index.top_m,
        "scorer": index.scorer_name,
        "relation": relation_spec(index.relation),
    }
    return _FORMAT.write(
        path,
        {"settings": settings, "metadata": dict(metadata or {})},
        built_by={"embedder": None if vectors is None else embedder_identity(index.embedder)},
        fill=lambda conn: conn.executemany("INSERT INTO fragments VALUES (?, ?, ?, ?, ?, ?, ?)", rows),
    )


# --------------------------------------------------------------------------------------------- load


def _read_header(path: Path) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """``(settings, metadata, embedder identity)`` of the index file ``path``, or a ValueError saying what is
    wrong with it."""
    header = _FORMAT.header(path)
    settings, metadata = header.get("settings"), header.get("metadata")
    if not isinstance(settings, dict) or not isinstance(metadata, dict):
        raise _FORMAT.damaged(path, "settings/metadata are not JSON objects")
    return settings, metadata, header["built_by"].get("embedder")


def _setting(settings: dict[str, Any], key: str, path: Path, valid: Callable[[Any], bool]) -> Any:
    """``settings[key]`` (None when absent) if ``valid`` accepts it, else the file's damage error."""
    value = settings.get(key)
    if not valid(value):
        raise _FORMAT.damaged(path, f"{key}={value!r}")
    return value


def _is_int(value: object, minimum: float = -math.inf) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _read_fragments(
    path: Path, n: int, dim: int, n_windows: int
) -> tuple[list[Fragment], np.ndarray | None, np.ndarray | None]:
    rows = _FORMAT.read(
        path,
        lambda conn, _: conn.execute(
            "SELECT idx, doc_id, position, text, metadata, n_windows, vectors FROM fragments ORDER BY idx"
        ).fetchall(),
    )
    if len(rows) != n or any(r[0] != i for i, r in enumerate(rows)):
        raise _FORMAT.damaged(path, f"expected fragments 0..{n - 1}, found {len(rows)} rows")
    fragments, blocks = [], []
    for i, (_, doc_id, position, text, meta, n_win, blob) in enumerate(rows):
        try:
            fragments.append(Fragment(text, doc_id, position, stored_json(meta, f"the metadata of fragment {i}")))
        except (TypeError, ValueError) as exc:
            raise _FORMAT.damaged(path, exc) from None
        if dim == 0:
            continue
        if not isinstance(n_win, int) or n_win < 1 or not isinstance(blob, bytes) or len(blob) != n_win * dim * 4:
            raise _FORMAT.damaged(path, f"the embeddings of fragment {i} are not {n_win} x {dim} float32")
        blocks.append(np.frombuffer(blob, dtype="<f4").reshape(n_win, dim))
    if dim == 0:
        return fragments, None, None
    vectors = np.concatenate(blocks).astype(np.float32) if blocks else np.zeros((0, dim), np.float32)
    if vectors.shape[0] != n_windows or not np.all(np.isfinite(vectors)):
        raise _FORMAT.damaged(path, f"embeddings: {vectors.shape[0]} windows for {n_windows}, or NaN/inf")
    return fragments, vectors, np.cumsum([0] + [block.shape[0] for block in blocks[:-1]])


def _check_embedder(path: Path, settings: dict[str, Any], identity: Any, embedder: Embedder | None) -> None:
    """ValueError naming ``path`` unless ``embedder`` (None: the embedded default) is the model the index was
    embedded with: its name, then its whole recorded identity (see
    :func:`~fragrel_integrations.core.embedder_identity.embedder_identity`)."""
    stored_model = settings.get("embedder")
    if not isinstance(stored_model, str) or not isinstance(identity, dict):
        raise _FORMAT.damaged(path, f"embedder={stored_model!r:.80}, identity={identity!r:.80}")
    from ..models import local

    current = local.default_embedder_id() if embedder is None else embedder_id(embedder)
    if current != stored_model:
        raise ValueError(
            f"{path} was embedded with {stored_model!r}, not {current!r}: pass embedder= the model it was "
            "built with, or rebuild the index"
        )
    check_identity(identity, local.default_embedder() if embedder is None else embedder, str(path))


def load_index(
    index_type: Callable[..., IndexT],
    path: str | Path,
    *,
    embedder: Embedder | None = None,
    relation: Relation | None = None,
    alpha: float | None = None,
    scorer: ScorerName | Scorer | None = None,
    expect: Mapping[str, Any] | None = None,
    top_m: int | Literal["saved"] | None = "saved",
) -> IndexT:
    """Read the index :func:`save_index` wrote to ``path`` as an ``index_type`` (:class:`FragRelIndex`; see
    :meth:`FragRelIndex.load`, which passes its class: this module does not import the index).

    The file is opened read-only. A missing file raises FileNotFoundError; a file that is not a FragRel index,
    a damaged one, one embedded by another model than ``embedder`` (``None``: the embedded default) or one
    whose metadata differs from ``expect`` raises ValueError naming the file. The loaded index has the file's
    metadata in ``index.saved_metadata``.
    """
    path = Path(path).expanduser()
    settings, metadata, identity = _read_header(path)
    for key, value in (expect or {}).items():
        if metadata.get(key) != value:
            raise ValueError(f"{path}: saved {key}={metadata.get(key)!r}, expected {value!r} (a stale index)")
    n, dim, n_windows = (_setting(settings, key, path, lambda v: _is_int(v, 0)) for key in _COUNTS)
    if dim:
        _check_embedder(path, settings, identity, embedder)
    if relation is None:
        if settings.get("relation") is None:
            raise ValueError(f"{path} was saved with a custom relation: pass relation= to load it")
        try:
            relation = relation_from_spec(settings["relation"])
        except ValueError as exc:
            raise _FORMAT.damaged(path, exc) from None
    if scorer is None:
        if settings.get("scorer") is None:
            raise ValueError(f"{path} was saved with a custom scorer: pass scorer= to load it")
        scorer = _setting(settings, "scorer", path, lambda v: v in SCORER_NAMES)
    if alpha is None:
        alpha = _setting(settings, "alpha", path, lambda v: (_is_int(v) or isinstance(v, float)) and math.isfinite(v))
    if top_m == "saved":  # absent in files written before top_m existed: None, as then
        top_m = _setting(settings, "top_m", path, lambda v: v is None or _is_int(v, 1))
    window_words = _setting(settings, "window_words", path, lambda v: v is None or _is_int(v))
    fragments, vectors, offsets = _read_fragments(path, n, dim, n_windows)
    try:
        index = index_type(
            fragments,
            embedder=embedder,
            relation=relation,
            alpha=alpha,
            top_m=top_m,
            scorer=scorer,
            window_words=window_words,
            window_embeddings=None if vectors is None else (vectors, offsets),
        )
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc
    index.saved_metadata = metadata
    return index


# --------------------------------------------------------------------------------------------- CLI cache


def file_sha256(data: bytes) -> str:
    """Hex SHA-256 of a file's bytes (what a cached index of the file is keyed by).

    >>> file_sha256(b"")[:12]
    'e3b0c44298fc'
    """
    return hashlib.sha256(data).hexdigest()
