"""Which embedder built a saved state: its id, dimension, window and a fingerprint, recorded and checked on load."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..models.embedder import CachedEmbedder, Embedder, check_embeddings
from .windows import embedder_window_tokens

__all__ = ["IDENTITY_PROBE", "check_identity", "embedder_id", "embedder_identity", "identity_mismatch"]


def embedder_id(embedder: object) -> str:
    """A string naming the model behind ``embedder`` (what a persisted index or an embedding cache is keyed by).

    An embedder may say it itself with a ``model_id`` string; otherwise the class and the first of
    ``model_name``/``model`` found on it (or on the model it wraps) are used.

    >>> class E:
    ...     model_name = "m1"
    >>> embedder_id(E()).endswith("E:m1")
    True
    """
    own = getattr(embedder, "model_id", None)
    if isinstance(own, str) and own:
        return own
    if isinstance(embedder, CachedEmbedder):
        return embedder_id(embedder.embedder)
    cls = type(embedder)
    for obj in (embedder, getattr(embedder, "embed_model", None)):
        for attr in ("model_name", "model"):
            value = getattr(obj, attr, None) if obj is not None else None
            if isinstance(value, str) and value:
                return f"{cls.__module__}.{cls.__qualname__}:{value}"
    return f"{cls.__module__}.{cls.__qualname__}"


#: The text every embedder embeds when saved state records (and a load checks) which model built it.
IDENTITY_PROBE = "FragRel identity probe: Robinson Crusoe counts 1719 footprints on the sand at noon."


#: Length of the fingerprint: the probe's unit vector folded onto this many numbers (component i adds to i mod 32).
_FINGERPRINT_SIZE = 32


#: Cosine two fingerprints must reach to be the same model (one model on two machines: > 0.999; two models or
#: two seeds of one: about 0 +- 0.2).
_FINGERPRINT_COSINE = 0.99


_IDENTITY_KEYS = ("id", "dim", "normalised", "max_input_tokens", "fingerprint")


def embedder_identity(embedder: Embedder) -> dict[str, Any]:
    """What saved state records about the embedder that built it, so that a load with another model is refused:
    its :func:`embedder_id` (class and model name or path), the dimension, whether its vectors come normalised,
    the input window in tokens (:func:`embedder_window_tokens`) and a fingerprint of its vector for a fixed probe
    text (:data:`IDENTITY_PROBE`, folded onto 32 numbers, 4 decimals): two models, or two settings of one
    model, that share a name and a dimension still differ there. Costs one embedding call.

    >>> from fragrel_integrations.testing import HashingEmbedder
    >>> ident = embedder_identity(HashingEmbedder(dim=64))
    >>> ident["dim"], ident["normalised"], len(ident["fingerprint"])
    (64, True, 32)
    >>> identity_mismatch(ident, embedder_identity(HashingEmbedder(dim=64, seed=1))).split(":")[0]
    'a different embedding for the same text (fingerprint cosine 0.31)'
    """
    vector = check_embeddings(embedder.embed_documents([IDENTITY_PROBE]), 1, source="the embedder")[0]
    norm = float(np.linalg.norm(vector))
    unit = vector.astype(np.float64) / max(norm, 1e-12)
    folded = np.zeros(_FINGERPRINT_SIZE)
    np.add.at(folded, np.arange(unit.size) % _FINGERPRINT_SIZE, unit)
    return {
        "id": embedder_id(embedder),
        "dim": int(vector.size),
        "normalised": abs(norm - 1.0) < 1e-3,
        "max_input_tokens": embedder_window_tokens(embedder),
        "fingerprint": [round(float(x), 4) for x in folded],
    }


def identity_mismatch(saved: Mapping[str, Any], current: Mapping[str, Any]) -> str | None:
    """Why state built by the embedder ``saved`` describes must not be used with the one ``current`` describes
    (both from :func:`embedder_identity`), or None when it may. ValueError when ``saved`` is not such a record."""
    if not isinstance(saved, Mapping) or set(saved) != set(_IDENTITY_KEYS):
        raise ValueError(f"the recorded embedder identity is damaged (an object with {list(_IDENTITY_KEYS)} expected)")
    fingerprint = saved["fingerprint"]
    if (
        not isinstance(saved["id"], str)
        or isinstance(saved["dim"], bool)
        or not isinstance(saved["dim"], int)
        or not isinstance(saved["normalised"], bool)
        or not (saved["max_input_tokens"] is None or type(saved["max_input_tokens"]) is int)
        or not isinstance(fingerprint, list)
        or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in fingerprint)
    ):
        raise ValueError("the recorded embedder identity is damaged (a field has the wrong type)")
    if saved["id"] != current["id"]:
        return f"built with the embedder {saved['id']!r}, not {current['id']!r}"
    if saved["dim"] != current["dim"]:
        return f"built with {saved['dim']}-dimensional vectors, the embedder gives {current['dim']}"
    if saved["normalised"] != current["normalised"]:
        word = {True: "normalised", False: "unnormalised"}
        return f"built with {word[saved['normalised']]} vectors, the embedder gives {word[current['normalised']]} ones"
    if saved["max_input_tokens"] != current["max_input_tokens"]:
        return (
            f"built with an embedder reading {saved['max_input_tokens']} tokens per text, this one reads "
            f"{current['max_input_tokens']} (set its max_input_tokens to the saved value)"
        )
    a, b = np.asarray(fingerprint, dtype=np.float64), np.asarray(current["fingerprint"], dtype=np.float64)
    cosine = float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-12)) if a.shape == b.shape else 0.0
    if cosine < _FINGERPRINT_COSINE:
        return (
            f"a different embedding for the same text (fingerprint cosine {cosine:.2f}): another model or other "
            "settings behind the same name"
        )
    return None


def check_identity(saved: object, embedder: Embedder, where: str) -> None:
    """ValueError starting with ``where`` (the saved file) when ``embedder`` is not the one whose
    :func:`embedder_identity` is ``saved``, naming the difference and the fix."""
    try:
        why = identity_mismatch(saved, embedder_identity(embedder))  # type: ignore[arg-type]
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}; rebuild it") from None
    if why is not None:
        raise ValueError(
            f"{where} was {why}: pass the embedder it was built with (same model and settings), or rebuild it"
        )
