"""Our chat models (the embedded SmolLM2, an OpenAI-compatible server) as a LlamaIndex ``LLM``, in LlamaIndex's
namespace (re-exported from :mod:`fragrel_integrations.llama_index`).

>>> from llama_index.llms.fragrel import FragRelLLM
"""

from fragrel_integrations.llama_index import FragRelLLM

__all__ = ["FragRelLLM"]
