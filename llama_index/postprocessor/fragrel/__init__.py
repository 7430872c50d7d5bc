"""The FragRel node postprocessor in LlamaIndex's namespace (re-exported from :mod:`fragrel_integrations.llama_index`).

>>> from llama_index.postprocessor.fragrel import FragRelPostprocessor
"""

from fragrel_integrations.llama_index import FragRelPostprocessor

__all__ = ["FragRelPostprocessor"]
