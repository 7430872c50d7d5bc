"""RET-LLM triplet memory: a read-write store of ``<t1, t2, t3>`` facts with exact-then-fuzzy lookup.

- :class:`TripletStore` — write / read (all query shapes) / update / delete, validity intervals, ``as_of``.
- :class:`SQLiteBackend` (default), :class:`PostgresBackend` (``[postgres]`` extra) — storage.
- :mod:`.text_api` — ``[MEM_WRITE{t1>>t2>>t3}]`` / ``[MEM_READ{t1>>t2>>}: {...}]`` parsing and rendering.
- :class:`TripletMemoryController` — lets a prompted chat model write and read the memory through that text API.

Nothing here imports a framework or loads a model at import time.
"""

from .backend import StorageBackend
from .facts import FIELDS, TermMatch, Triplet, TripletRecord, normalize_term
from .memory_store import NodeRecord, TripletStore, TripletWrite
from .postgres_backend import PostgresBackend
from .sqlite_backend import SQLiteBackend
from .text_api import MemoryCall, escape_term, parse_calls, render_read, render_write, unescape_term
from .triplet_controller import TripletMemoryController

__all__ = [
    "FIELDS",
    "MemoryCall",
    "NodeRecord",
    "PostgresBackend",
    "SQLiteBackend",
    "StorageBackend",
    "TermMatch",
    "Triplet",
    "TripletMemoryController",
    "TripletRecord",
    "TripletStore",
    "TripletWrite",
    "escape_term",
    "normalize_term",
    "parse_calls",
    "render_read",
    "render_write",
    "unescape_term",
]
