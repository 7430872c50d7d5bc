"""A first answer in seconds on a new text: BM25 ranks every fragment, the embedder reads only the best-ranked.

:class:`StagedHybridScorer` is the hybrid independent score (0.5 min-max BM25 + 0.5 min-max dense, as
``scorer="hybrid"``) with its dense half computed for the ``candidates`` fragments BM25 ranks best for the query;
every other fragment gets the lowest dense score of the candidates (0 after min-max), so it ranks by BM25 alone.
Candidates are embedded (in sub-windows, as :class:`~fragrel_integrations.core.index.FragRelIndex` does) when a
query first needs them and kept, so later queries embed only fragments no earlier query ranked.
:class:`WindowVectorFile` keeps those vectors in a SQLite file between runs (the CLI's cache). The score of a
query does not depend on what is cached: only on the query's own candidates. With ``candidates`` at least the
number of fragments it equals the full hybrid score.

>>> import numpy as np
>>> class Words:  # a toy embedder: one dimension per word
...     vocabulary = ["cat", "dog", "sun", "moon"]
...     def embed_documents(self, texts):
...         return np.array([[t.split().count(w) + 0.01 for w in self.vocabulary] for t in texts], dtype=np.float32)
...     def embed_query(self, text):
...         return self.embed_documents([text])[0]
>>> scorer = StagedHybridScorer(["cat dog", "sun moon", "cat", "dog"], Words(), candidates=2, window_words=None)
>>> scorer("cat").round(2).tolist(), sorted(scorer.vectors)
([0.37, 0.0, 1.0, 0.0], [0, 2])
"""

from __future__ import annotations

import logging
import sqlite3
import warnings
from collections.abc import Mapping, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .._sqlite import SavedFormat, connect
from .._validation import check_positive_int, check_type
from ..models.embedder import Embedder, check_embeddings, embed_query, normalise_rows
from .embedder_identity import identity_mismatch
from .scorers import BM25Scorer, Scorer, minmax
from .windows import check_window_words, embed_windows, window_words_for

__all__ = ["DEFAULT_CANDIDATES", "StagedHybridScorer", "WindowVectorFile"]

logger = logging.getLogger(__name__)

#: Fragments the dense half reads per query by default: on the dev book questions (Jane Eyre, 500-word fragments)
#: the staged score keeps the full hybrid's hit@5 (benchmarks/results/book_answers.md).
DEFAULT_CANDIDATES = 32


class StagedHybridScorer:
    """``0.5 * minmax(BM25) + 0.5 * minmax(dense)`` where dense is read only for BM25's ``candidates`` best.

    ``embedder=None`` means the embedded all-MiniLM-L6-v2 (loaded on the first query). ``window_words``: see
    :class:`~fragrel_integrations.core.index.FragRelIndex` (``"auto"``: what the embedder reads). ``vectors``
    maps a fragment's index to its window vectors (``(windows, dim)``), e.g. read back from a
    :class:`WindowVectorFile`; :meth:`take_new` returns those embedded since the last call, to store them.
    ``lexical`` replaces the BM25 first stage (any ``query -> scores`` callable over the same texts). With
    ``store`` (a :class:`WindowVectorFile`) the stored vectors are read at once and each query's new ones are
    added to it (a store that cannot be written is dropped with a warning; the scores are unaffected).
    """

    def __init__(
        self,
        texts: Sequence[str],
        embedder: Embedder | None = None,
        *,
        candidates: int = DEFAULT_CANDIDATES,
        window_words: int | Literal["auto"] | None = "auto",
        vectors: Mapping[int, np.ndarray] | None = None,
        lexical: Scorer | None = None,
        batch_size: int = 64,
        store: WindowVectorFile | None = None,
    ) -> None:
        if isinstance(texts, str):
            raise TypeError("texts must be a list of strings, one per fragment")
        self.texts = list(texts)
        if not self.texts:
            raise ValueError("texts is empty: give one text per fragment")
        self.candidates = check_positive_int(candidates, "candidates")
        self._window_words = window_words if window_words == "auto" else check_window_words(window_words)
        self._embedder = embedder
        self.batch_size = check_positive_int(batch_size, "batch_size")
        self.lexical: Scorer = BM25Scorer(self.texts) if lexical is None else lexical
        self.vectors: dict[int, np.ndarray] = {}
        stored = {}
        if store is not None:
            check_type(store, WindowVectorFile, "store must be a WindowVectorFile")
            if store.n_fragments != len(self.texts):
                raise ValueError(f"the store holds {store.n_fragments} fragments, the scorer has {len(self.texts)}")
            stored = store.read()
        self.store = store
        for i, v in {**stored, **(vectors or {})}.items():
            if not (isinstance(i, int | np.integer) and 0 <= int(i) < len(self.texts)):
                raise ValueError(f"vectors has fragment index {i!r}; there are {len(self.texts)} fragments")
            self.vectors[int(i)] = check_embeddings(v, np.shape(v)[0], source=f"vectors[{i}]")
        self._new: set[int] = set()
        #: Fragments embedded by this scorer (not read from ``vectors``).
        self.n_embedded = 0

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            from ..models.local import default_embedder

            self._embedder = default_embedder()
        return self._embedder

    @property
    def window_words(self) -> int | None:
        """Words per sub-window (``"auto"`` resolved from the embedder on first use)."""
        if self._window_words == "auto":
            self._window_words = window_words_for(self.embedder)
        return self._window_words

    def ensure(self, indices: Sequence[int]) -> None:
        """Embed the fragments among ``indices`` that have no vectors yet."""
        missing = [int(i) for i in dict.fromkeys(indices) if int(i) not in self.vectors]
        if not missing:
            return
        vectors, offsets = embed_windows(
            self.embedder, [self.texts[i] for i in missing], window_words=self.window_words, batch_size=self.batch_size
        )
        for i, block in zip(missing, np.split(vectors, offsets[1:]), strict=True):
            self.vectors[i] = block
        self._new.update(missing)
        self.n_embedded += len(missing)

    def __call__(self, query: str) -> np.ndarray:
        check_type(query, str, "query must be str")
        lexical = np.asarray(self.lexical(query), dtype=np.float64)
        if lexical.shape != (len(self.texts),):
            raise ValueError(f"the lexical scorer returned {lexical.shape} scores for {len(self.texts)} fragments")
        picked = np.argsort(-lexical, kind="stable")[: self.candidates]  # ties in corpus order
        self.ensure(picked)
        q = embed_query(self.embedder, query)
        q = q / max(float(np.linalg.norm(q)), 1e-12)
        best = np.array([float((normalise_rows(self.vectors[int(i)]) @ q).max()) for i in picked])
        dense = np.full(len(self.texts), float(best.min()))
        dense[picked] = best
        self._save()
        return 0.5 * minmax(lexical) + 0.5 * minmax(dense)

    def _save(self) -> None:
        if self.store is None or not self._new:
            return
        try:
            self.store.add(self.take_new())
        except (OSError, ValueError) as exc:
            warnings.warn(f"could not write the vector cache {self.store.path} ({exc}); not caching", stacklevel=3)
            self.store = None

    def take_new(self) -> dict[int, np.ndarray]:
        """The vectors embedded since the last call (to store them, e.g. :meth:`WindowVectorFile.add`)."""
        new = {i: self.vectors[i] for i in sorted(self._new)}
        self._new.clear()
        return new


_FORMAT = SavedFormat(
    "fragrel-window-vectors",
    1,
    "FragRel vector cache",
    (
        "CREATE TABLE vectors (idx INTEGER PRIMARY KEY, n_windows INTEGER NOT NULL, dim INTEGER NOT NULL, "
        "data BLOB NOT NULL)",
    ),
    earlier=(("header", "fragrel-window-vectors"),),
)


class WindowVectorFile:
    """Fragment window vectors kept in one SQLite file, added to as queries embed more fragments.

    ``key`` (e.g. a hash of the text, the model and the splitting) is written into a new file and checked on
    every open, and so is ``identity``, the :func:`~.embedder_identity.embedder_identity` of the
    embedder whose vectors the file holds (its id, dimension and probe fingerprint, as a saved index records):
    a file made for other content, settings or another model (one behind the same name included) raises
    ValueError, as does a file that cannot be read. With ``rebuild=True`` such a file is replaced by an empty
    cache instead, with one logged warning (a SQLite database of something else is never replaced). A new file
    is written whole and moved into place (:class:`~fragrel_integrations._sqlite.SavedFormat`). Several processes
    may add to one file at once (SQLite's locking; a fragment written twice keeps its first vectors).

    >>> import tempfile
    >>> store = WindowVectorFile(Path(tempfile.mkdtemp()) / "book.vectors", key="k1", n_fragments=3)
    >>> store.add({2: np.ones((2, 4), dtype=np.float32)})
    >>> {i: v.shape for i, v in store.read().items()}
    {2: (2, 4)}
    """

    def __init__(
        self,
        path: str | Path,
        *,
        key: str,
        n_fragments: int,
        identity: Mapping[str, Any] | None = None,
        rebuild: bool = False,
    ) -> None:
        if not isinstance(key, str) or not key:
            raise ValueError("key must be a non-empty string naming the content, model and settings")
        self.path = Path(path).expanduser()
        self.key = key
        self.n_fragments = check_positive_int(n_fragments, "n_fragments")
        if identity is not None:
            identity_mismatch(identity, identity)  # ValueError unless it is an embedder_identity() record
        self.identity = None if identity is None else dict(identity)
        if self.path.is_dir():
            raise ValueError(f"{self.path} is a directory: give a file path for the vector cache")
        if self.path.exists():
            try:
                self._check()
            except ValueError as exc:
                if not (rebuild and self._ours()):
                    raise
                logger.warning("rebuilding the vector cache: %s", exc)
                self.path.unlink()
                self._create()

    def _ours(self) -> bool:
        """Whether the file at the path may be rebuilt: a vector cache (of any key, damaged or not), or a file
        that holds no SQLite tables at all (empty, truncated, not a database) -- never another database."""
        if _FORMAT.owns(self.path):
            return True
        try:
            with closing(connect(self.path, read_only=True)) as conn:
                return conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchone() is None
        except sqlite3.DatabaseError:
            return True

    def _check(self) -> None:
        head = _FORMAT.header(self.path)
        if head.get("key") != self.key or head.get("n_fragments") != self.n_fragments:
            raise ValueError(f"{self.path} was made for another text, model or settings (its key differs)")
        if self.identity is None:
            return
        recorded = head["built_by"].get("embedder")
        if recorded is None:
            raise ValueError(f"{self.path} does not record the embedder that built it")
        why = identity_mismatch(recorded, self.identity)
        if why is not None:
            raise ValueError(f"{self.path} was {why}")

    def _create(self) -> None:
        """Write an empty cache (its header) in one step."""
        _FORMAT.write(
            self.path, {"key": self.key, "n_fragments": self.n_fragments}, built_by={"embedder": self.identity}
        )

    def read(self) -> dict[int, np.ndarray]:
        """Every stored fragment's window vectors (empty when the file does not exist yet)."""
        if not self.path.exists():
            return {}
        self._check()
        rows = _FORMAT.read(
            self.path, lambda conn, _: conn.execute("SELECT idx, n_windows, dim, data FROM vectors").fetchall()
        )
        out: dict[int, np.ndarray] = {}
        for idx, n_windows, dim, data in rows:
            if not (0 <= idx < self.n_fragments) or len(data) != 4 * n_windows * dim or n_windows < 1:
                raise _FORMAT.damaged(self.path, f"fragment {idx} has a malformed vector row")
            out[int(idx)] = np.frombuffer(data, dtype="<f4").reshape(n_windows, dim).astype(np.float32)
        return out

    def add(self, vectors: Mapping[int, np.ndarray]) -> None:
        """Store ``vectors`` (fragment index -> window vectors); the file is created on the first call."""
        if not vectors:
            return
        rows = []
        for i, v in vectors.items():
            block = np.ascontiguousarray(check_embeddings(v, np.shape(v)[0], source=f"vectors[{i}]"), dtype="<f4")
            if not 0 <= int(i) < self.n_fragments:
                raise ValueError(f"fragment index {i} is outside 0..{self.n_fragments - 1}")
            if self.identity is not None and block.shape[1] != self.identity["dim"]:
                raise ValueError(
                    f"vectors[{i}] has {block.shape[1]} dimensions; the embedder has {self.identity['dim']}"
                )
            rows.append((int(i), block.shape[0], block.shape[1], block.tobytes()))
        new = not self.path.exists()
        try:
            if new:
                self._create()
            with closing(connect(self.path, timeout=30.0)) as conn, conn:
                conn.executemany("INSERT OR IGNORE INTO vectors VALUES (?, ?, ?, ?)", rows)
        except sqlite3.DatabaseError as exc:
            raise ValueError(f"{self.path}: cannot write the vector cache ({exc})") from None
        if new:
            self._check()  # another process may have created it first, for another key
