"""The RET-LLM triplet memory as a property graph store, in LlamaIndex's namespace (re-exported from
:mod:`fragrel_integrations.llama_index`).

>>> from llama_index.graph_stores.fragrel import TripletGraphStore
"""

from fragrel_integrations.llama_index import TripletGraphStore

__all__ = ["TripletGraphStore"]
