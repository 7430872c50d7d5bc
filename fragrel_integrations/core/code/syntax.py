"""Syntax records of one parsed source file: its named nodes, definitions, call sites and imports.

Plain data with JSON-safe records for persistence (no pickle); :mod:`.parse` builds them with tree-sitter.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, field
from typing import Any

import numpy as np

from .languages import ImportRecord, get_language

__all__ = ["CallSite", "Definition", "FileSyntax"]


@dataclass(frozen=True, slots=True)
class Definition:
    """A function, method or class definition (``node`` is the local id of the definition node)."""

    node: int
    name: str
    kind: str  # "function" or "class"
    scope: str | None  # enclosing class (or Go receiver type) of a method
    top_level: bool  # defined at file level (not inside a function or class)
    default_export: bool = False  # JS/TS ``export default``


@dataclass(frozen=True, slots=True)
class CallSite:
    """A call expression (``node`` local id): ``receiver.name(...)``; ``receiver`` None for a bare call and
    ``"?"`` for a complex receiver expression."""

    node: int
    name: str
    receiver: str | None
    is_new: bool
    enclosing_class: str | None


@dataclass
class FileSyntax:
    """One parsed file: its named syntax nodes (arrays indexed by local id, pre-order, root = 0) and the
    definitions, call sites and imports found by the language's query. Lines are 1-based and inclusive."""

    path: str
    language: str
    sha1: str
    n_lines: int
    has_error: bool
    parent: np.ndarray  # int32, -1 for the root
    start_line: np.ndarray  # int32
    end_line: np.ndarray  # int32
    size: np.ndarray  # int32, bytes
    kind: np.ndarray  # int32 tree-sitter kind id
    definitions: list[Definition] = field(default_factory=list)
    calls: list[CallSite] = field(default_factory=list)
    imports: list[ImportRecord] = field(default_factory=list)
    package: str | None = None

    @property
    def n_nodes(self) -> int:
        return int(self.parent.shape[0])

    def kind_name(self, local: int) -> str:
        return str(get_language(self.language).node_kind_for_id(int(self.kind[local])))

    # JSON-safe records for persistence (no pickle)
    def records(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in ("path", "language", "sha1", "n_lines", "has_error", "package")}
        out["definitions"] = [list(astuple(d)) for d in self.definitions]
        out["calls"] = [list(astuple(c)) for c in self.calls]
        out["imports"] = [list(i) for i in self.imports]
        return out

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k) for k in _ARRAYS}

    @classmethod
    def from_records(cls, records: dict[str, Any], arrays: dict[str, np.ndarray]) -> FileSyntax:
        return cls(
            path=records["path"],
            language=records["language"],
            sha1=records["sha1"],
            n_lines=int(records["n_lines"]),
            has_error=bool(records["has_error"]),
            **{k: np.asarray(arrays[k], np.int32) for k in _ARRAYS},
            definitions=[Definition(*d) for d in records["definitions"]],
            calls=[CallSite(*c) for c in records["calls"]],
            imports=[ImportRecord(*i) for i in records["imports"]],
            package=records.get("package"),
        )


_ARRAYS = ("parent", "start_line", "end_line", "size", "kind")
