"""FragRel retrievers in LlamaIndex's namespace (re-exported from :mod:`fragrel_integrations.llama_index`).

>>> from llama_index.retrievers.fragrel import FragRelRetriever
"""

from fragrel_integrations.llama_index import (
    FragRelIndexRetriever,
    FragRelRetriever,
    SurpriseTreeRetriever,
    TripletMemoryRetriever,
)

__all__ = ["FragRelIndexRetriever", "FragRelRetriever", "SurpriseTreeRetriever", "TripletMemoryRetriever"]
