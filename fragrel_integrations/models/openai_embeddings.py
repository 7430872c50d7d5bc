"""Embedder for any OpenAI-compatible ``/embeddings`` endpoint; server, key, deadline as for ``OpenAIChatModel``.

>>> emb = OpenAIEmbedder("nomic-embed-text", base_url="http://127.0.0.1:8080/v1")   # connects on first use
>>> emb.model_id
'openai-compatible:http://127.0.0.1:8080/v1/nomic-embed-text'
"""

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._validation import check_positive_int, check_type
from .embedder import check_embeddings
from .openai_chat import OpenAIServer, short_repr

__all__ = ["OpenAIEmbedder"]

logger = logging.getLogger(__name__)


class OpenAIEmbedder(OpenAIServer):
    """Texts to float32 vectors, ``batch_size`` per request; ``max_input_tokens`` is the model's input window. Token
    vectors (a server without pooling) are averaged, texts then going one per request."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        batch_size: int = 64,
        max_input_tokens: int | None = None,
        dimensions: int | None = None,
        default_headers: dict[str, str] | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError("model must be the embedding model name the server serves, e.g. 'text-embedding-3-small'")
        self.batch_size = check_positive_int(batch_size, "batch_size")
        for name, value in (("max_input_tokens", max_input_tokens), ("dimensions", dimensions)):
            if value is not None:
                check_positive_int(value, name, hint=" or None")
        super().__init__(base_url, api_key, timeout, max_retries, default_headers)
        self.model_name = model
        self.max_input_tokens = max_input_tokens
        self.dimensions = dimensions
        self.per_token = False
        self._dim: int | None = None
        self._warned_zero = False
        self._source = f"the embeddings server at {self.base_url} (model {model!r})"

    @property
    def model_id(self) -> str:
        """Server, name and vector length: what saved state records."""
        suffix = f"@{self.dimensions}" if self.dimensions else ""
        return f"openai-compatible:{self.base_url}/{self.model_name}{suffix}"

    async def _vectors(self, texts: list[str]) -> tuple[np.ndarray, bool]:
        """One request's checked vectors, and whether they came per token."""
        req: dict[str, Any] = {"model": self.model_name, "input": texts, "encoding_format": "float"}
        if self.dimensions is not None:
            req["dimensions"] = self.dimensions
        try:
            response = await self._request(lambda: self._client().embeddings.create(**req))
        except self._openai.NotFoundError as exc:
            raise ValueError(
                f"the server at {self.base_url} has no embeddings for model {self.model_name!r} ({exc}); check the "
                "model name, and start a llama.cpp server with --embedding"
            ) from exc
        source = self._source
        rows = _rows(getattr(response, "data", None), len(texts), source)
        per_token = bool(rows) and all(r and isinstance(r[0], list) for r in rows)
        if per_token:
            rows = [np.asarray(r, dtype=np.float32).mean(axis=0) for r in rows]
        if len({len(r) for r in rows}) > 1:
            raise ValueError(f"{source} returned vectors of different lengths: {sorted({len(r) for r in rows})}")
        vectors = check_embeddings(rows, len(texts), source=source)
        zero = ~vectors.any(axis=1)
        if zero.any() and not self._warned_zero:
            self._warned_zero = True
            first = short_repr(texts[int(zero.argmax())], 80)
            logger.warning(
                "%s returned all-zero vectors for %d of %d texts (first: %s)", source, zero.sum(), len(texts), first
            )
        return vectors, per_token

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError("texts must be a list of strings")
        texts = list(texts)
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        parts, start = [], 0
        while start < len(texts):
            batch = texts[start : start + (1 if self.per_token else self.batch_size)]
            vectors, per_token = self._sync(self._vectors(batch))
            if per_token and not self.per_token:
                logger.warning(
                    "%s returned one vector per token (a model served without pooling); averaging them, one text "
                    "per request. Serve the model with a pooling type (llama-server --pooling mean|cls|last).",
                    self._source,
                )
                self.per_token = True  # batched token vectors get mixed up
                if len(batch) > 1:
                    continue
            parts.append(vectors)
            start += len(batch)
        out = np.concatenate(parts)
        if self._dim is not None and out.shape[1] != self._dim:
            raise ValueError(
                f"{self._source} changed vector length from {self._dim} to {out.shape[1]}; was another model loaded "
                "behind the same name?"
            )
        self._dim = out.shape[1]
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([check_type(text, str, "query must be str")])[0]

    def __repr__(self) -> str:
        return f"OpenAIEmbedder({self.model_name!r}, base_url={self.base_url!r})"


def _rows(items: Any, n: int, source: str) -> list[Any]:
    """The reply's ``embedding`` lists in ``index`` order, checked."""
    if not isinstance(items, list):
        raise ValueError(f"{source} sent a reply without a list of embeddings ('data'): {short_repr(items)}")
    index = [getattr(d, "index", None) for d in items]
    for i in index:
        if type(i) is not int:
            raise ValueError(f"{source} sent an embedding without an integer 'index' (got {short_repr(i)})")
    if sorted(index) != list(range(n)):
        raise ValueError(f"{source} returned {len(items)} vectors for {n} texts (indexes {short_repr(sorted(index))})")
    rows = [d.embedding for d in sorted(items, key=lambda d: d.index)]
    for row in rows:
        if not isinstance(row, list):  # base64 text or None
            raise ValueError(f"{source} did not return float vectors (got {type(row).__name__})")
        flat = [x for r in row for x in r] if row and all(isinstance(r, list) for r in row) else row
        for x in flat:
            if type(x) not in (float, int):
                raise ValueError(
                    f"{source} did not return float vectors: a value is {type(x).__name__} ({short_repr(x, 60)})"
                )
    return rows
