"""Independent scores for code: RepoCoder's sparse retriever (Jaccard similarity of token sets)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np
import scipy.sparse as sp

__all__ = ["JaccardScorer", "code_tokens"]

_CODE_TOKEN = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*|\d+")


def code_tokens(text: str) -> list[str]:
    """Identifier and number tokens of code (case kept: ``Foo`` and ``foo`` differ).

    >>> code_tokens("self.fetch(url, timeout=30)")
    ['self', 'fetch', 'url', 'timeout', '30']
    """
    return _CODE_TOKEN.findall(text)


class JaccardScorer:
    """Jaccard similarity ``|Q & F| / |Q | F|`` between the token *sets* of the query and of each fragment.

    The sparse retriever of RepoCoder. Same protocol as the core scorers: ``scorer(query)`` returns one score per
    fragment, in corpus order.

    >>> scorer = JaccardScorer(["def add(a, b):", "return a + b"])
    >>> scorer("add(a, b)").round(3).tolist()
    [0.75, 0.5]
    """

    def __init__(self, texts: Sequence[str], *, tokenizer: Callable[[str], list[str]] = code_tokens) -> None:
        if isinstance(texts, str):
            raise TypeError("texts must be a list of strings; wrap a single text as [text]")
        if not callable(tokenizer):
            raise TypeError("tokenizer must be a callable text -> list of tokens")
        self.tokenizer = tokenizer
        self.vocab: dict[str, int] = {}
        rows, cols = [], []
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"texts[{i}] must be str, got {type(text).__name__}")
            ids = {self.vocab.setdefault(t, len(self.vocab)) for t in tokenizer(text)}
            rows.extend([i] * len(ids))
            cols.extend(ids)
        self.n = len(texts)
        data = np.ones(len(rows), np.float64)
        self.matrix = sp.csr_array((data, (rows, cols)), shape=(self.n, max(len(self.vocab), 1)))
        self.sizes = np.asarray(self.matrix.sum(axis=1)).ravel()

    def __call__(self, query: str) -> np.ndarray:
        if not isinstance(query, str):
            raise TypeError(f"query must be str, got {type(query).__name__}")
        tokens = set(self.tokenizer(query))
        known = np.fromiter((self.vocab[t] for t in tokens if t in self.vocab), np.int64)
        q = np.zeros(self.matrix.shape[1])
        q[known] = 1.0
        inter = np.asarray(self.matrix @ q).ravel()
        union = self.sizes + len(tokens) - inter
        out = np.zeros(self.n)
        np.divide(inter, union, out=out, where=union > 0)
        return out
