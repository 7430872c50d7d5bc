"""The surprise tree's data: its settings (:class:`TreeConfig`), nodes (:class:`TreeNode`) and retrieved texts
(:class:`TreeHit`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..._validation import check_positive_int
from .clustering import REDUCERS

__all__ = [
    "CHUNK_TOKENS",
    "FIELDS",
    "SUMMARISERS",
    "TreeConfig",
    "TreeHit",
    "TreeNode",
    "check_search",
    "fitted_chunk_tokens",
]

#: Names of the summarisers a tree can use (:attr:`TreeConfig.summariser`).
SUMMARISERS = ("llm", "extractive")

#: The texts a node can contribute to retrieval: the leaf chunk, the summary and the surprise facts.
FIELDS = ("text", "summary", "surprise")


#: ILM-TR's leaf chunk length in tokens: the default when the embedder reads at least that much of a text.
CHUNK_TOKENS = 600

#: Share of the embedder's input window a default chunk fills: chunks are counted with the chat model's tokenizer
#: (or the estimate), the window in the embedder's word pieces, which run up to ~1.2 per chat-model token on
#: English prose; 0.8 keeps a chunk inside the window.
WINDOW_SHARE = 0.8


def fitted_chunk_tokens(window: int | None) -> int:
    """The default ``chunk_tokens`` for an embedder that reads ``window`` tokens of a text (None: not known):
    ILM-TR's 600, or less when the embedder would cut a 600-token chunk off.

    >>> fitted_chunk_tokens(256), fitted_chunk_tokens(8192), fitted_chunk_tokens(None)
    (200, 600, 600)
    """
    if window is None:
        return CHUNK_TOKENS
    fitted = int(WINDOW_SHARE * max(window - 2, 1))  # 2 pieces go to [CLS] and [SEP]
    return max(1, min(CHUNK_TOKENS, fitted - fitted % 10 if fitted >= 10 else fitted))


def check_search(mode: object, fields: Sequence[str]) -> tuple[str, ...]:
    """Validate a retrieval ``mode`` (``"collapsed"`` or ``"traversal"``) and ``fields`` (a non-empty subset of
    :data:`FIELDS`); returns the fields as a tuple."""
    wanted = tuple(fields)
    if not wanted or not set(wanted) <= set(FIELDS):
        raise ValueError(f"fields must be a non-empty subset of {FIELDS}, got {fields!r}")
    if mode not in ("collapsed", "traversal"):
        raise ValueError(f"mode must be 'collapsed' or 'traversal', got {mode!r}")
    return wanted


_POSITIVE_FIELDS = (
    "chunk_tokens",
    "summary_tokens",
    "surprise_tokens",
    "max_cluster_tokens",
    "reduction_dim",
    "max_clusters",
    "max_layers",
)


@dataclass(frozen=True, slots=True)
class TreeConfig:
    """Settings that shape a tree (persisted with it). Defaults follow ILM-TR (600-token chunks, 300-token
    summaries) and RAPTOR (10 reduced dimensions, soft threshold 0.1); chunks shrink to fit an embedder that reads
    fewer tokens (``chunk_tokens=None``: 200 with the embedded all-MiniLM-L6-v2, which reads 256).

    ``summariser``: who writes the summaries and surprise notes, one of :data:`SUMMARISERS`: ``"llm"`` (the
    chat model, ILM-TR's prompt), ``"extractive"`` (no model: central and novel sentences, see
    :mod:`.extractive`), or None = ``"llm"`` when the tree gets a chat model, else ``"extractive"``
    (:class:`SurpriseTree` resolves it, so a saved tree records what built it).
    """

    #: Most tokens per leaf chunk (whole sentences are packed). None: :func:`fitted_chunk_tokens` of the
    #: embedder's window (600, or what fits a shorter window); :class:`SurpriseTree` resolves it to an int.
    chunk_tokens: int | None = None
    #: Token budget of every summary.
    summary_tokens: int = 300
    #: Token budget of every surprise note.
    surprise_tokens: int = 150
    #: Most tokens of member summaries under one parent (larger clusters are split again).
    max_cluster_tokens: int = 3000
    #: Dimensions the summary vectors are reduced to before clustering.
    reduction_dim: int = 10
    #: Posterior probability at which a node also joins another cluster (soft clustering).
    threshold: float = 0.1
    #: Most Gaussian mixture components tried per clustering.
    max_clusters: int = 50
    #: Most summary layers above the leaves.
    max_layers: int = 5
    #: Dimension reduction, one of :data:`~.clustering.REDUCERS`.
    reducer: str = "auto"
    #: Seed of the reduction and the mixtures.
    seed: int = 0
    summariser: str | None = None

    def __post_init__(self) -> None:
        for name in _POSITIVE_FIELDS:
            if name != "chunk_tokens" or self.chunk_tokens is not None:
                check_positive_int(getattr(self, name), name)
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold!r}")
        if self.reducer not in REDUCERS:
            raise ValueError(f"reducer must be one of {REDUCERS}, got {self.reducer!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise TypeError(f"seed must be an int, got {type(self.seed).__name__}")
        if self.summariser is not None and self.summariser not in SUMMARISERS:
            raise ValueError(
                f"summariser must be one of {SUMMARISERS} (or None: 'llm' with a chat model, else 'extractive'), "
                f"got {self.summariser!r}"
            )


@dataclass(slots=True)
class TreeNode:
    """One node. Leaves (layer 0) hold a chunk in ``text``; every node has a ``summary`` and maybe a ``surprise``.

    ``parsed`` is False when the model's reply lacked a section (the reply became the summary); ``failed`` is True
    when the call raised or returned nothing (the summary is then the start of the input text).
    """

    id: int
    layer: int
    summary: str
    surprise: str = ""
    text: str = ""
    children: tuple[int, ...] = ()
    doc_id: str = ""
    position: int = -1
    metadata: dict[str, Any] = field(default_factory=dict)
    parsed: bool = True
    failed: bool = False

    @property
    def is_leaf(self) -> bool:
        return self.layer == 0

    def field_text(self, name: str) -> str:
        """The text of ``name`` (one of :data:`FIELDS`); empty when the node has none."""
        if name not in FIELDS:
            raise ValueError(f"field must be one of {FIELDS}, got {name!r}")
        return getattr(self, name)


@dataclass(frozen=True, slots=True)
class TreeHit:
    """A retrieved text: which node and field it came from, and its cosine score."""

    node: TreeNode
    field: str
    text: str
    score: float

    @property
    def node_id(self) -> int:
        return self.node.id

    @property
    def layer(self) -> int:
        return self.node.layer
