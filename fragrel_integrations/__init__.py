"""fragrel-integrations: relation-aware retrieval and memory for LangChain and LlamaIndex.

Framework adapters live in :mod:`fragrel_integrations.langchain` and :mod:`fragrel_integrations.llama_index`;
importing this package imports neither framework and loads no model. Every name of the core facade
(:mod:`fragrel_integrations.core`: the index, scorers, relations, splitters, grounded answers) is importable
from here; the other four components and their main types too, loaded on first access (``SurpriseTree`` needs
the surprise tree's optional dependencies only when it is used):

>>> from fragrel_integrations import FragRelIndex, InnerLoopEngine, SelfControlledMemory, SurpriseTree, TripletStore
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import core
from ._lazy import lazy_exports
from .core import *  # noqa: F403  (the whole core facade: its __all__ is added to this one below)
from .models.embedder import Embedder

if TYPE_CHECKING:
    from .core.inner_loop import InnerLoopEngine, InnerLoopResult
    from .core.scm import MemoryItem, SelfControlledMemory
    from .core.tree import SurpriseTree, TreeConfig, TreeHit
    from .core.triplets import Triplet, TripletStore

__version__ = "0.1.0"

__all__ = [
    "Embedder",
    "InnerLoopEngine",
    "InnerLoopResult",
    "MemoryItem",
    "SelfControlledMemory",
    "SurpriseTree",
    "TreeConfig",
    "TreeHit",
    "Triplet",
    "TripletStore",
    "__version__",
]
__all__ += core.__all__

# the other components, imported on first access: name -> the module that defines it
_LAZY = {
    "InnerLoopEngine": "core.inner_loop",
    "InnerLoopResult": "core.inner_loop",
    "MemoryItem": "core.scm",
    "SelfControlledMemory": "core.scm",
    "SurpriseTree": "core.tree",
    "TreeConfig": "core.tree",
    "TreeHit": "core.tree",
    "Triplet": "core.triplets",
    "TripletStore": "core.triplets",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals(), __all__)
