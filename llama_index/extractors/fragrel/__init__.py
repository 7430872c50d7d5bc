"""The surprise-tree metadata extractor in LlamaIndex's namespace (re-exported from
:mod:`fragrel_integrations.llama_index`).

>>> from llama_index.extractors.fragrel import SurpriseExtractor
"""

from fragrel_integrations.llama_index import SurpriseExtractor

__all__ = ["SurpriseExtractor"]
