"""Release readiness: the sdist and the wheel build from the source tree, their metadata is complete and the
wheel ships ``py.typed`` (PEP 561), the MIT ``LICENSE`` and the package code, but no tests or benchmarks; the
LlamaIndex namespace packages (``llama_index.retrievers.fragrel``, ...) import from the wheel installed in a fresh
virtual environment and from an editable install."""

from __future__ import annotations

import email.parser
import shutil
import subprocess
import sys
import tarfile
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

import fragrel_integrations

pytest.importorskip("build")

#: LlamaIndex namespace -> the names it re-exports from fragrel_integrations.llama_index
NAMESPACES = {
    "llama_index.retrievers.fragrel": [
        "FragRelIndexRetriever",
        "FragRelRetriever",
        "SurpriseTreeRetriever",
        "TripletMemoryRetriever",
    ],
    "llama_index.postprocessor.fragrel": ["FragRelPostprocessor"],
    "llama_index.graph_stores.fragrel": ["TripletGraphStore"],
    "llama_index.memory.fragrel": ["SCMMemory", "SCMMemoryBlock", "VectorStoreStreamIndex"],
    "llama_index.extractors.fragrel": ["SurpriseExtractor"],
    "llama_index.embeddings.fragrel": ["MiniLMEmbedding"],
    "llama_index.llms.fragrel": ["FragRelLLM"],
}

ROOT = Path(fragrel_integrations.__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> dict[str, Path]:
    """sdist + wheel built (without build isolation: offline, the venv's setuptools) from a copy of the tree."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    for package in ("fragrel_integrations", "llama_index"):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = src / "dist"
    run = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--wheel", "--no-isolation", "--outdir", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return {"wheel": next(out.glob("*.whl")), "sdist": next(out.glob("*.tar.gz")), "src": src}


def test_wheel_metadata_is_complete(dists):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    with zipfile.ZipFile(dists["wheel"]) as wheel:
        names = wheel.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(wheel.read(meta_name).decode())
    assert meta["Name"] == project["name"] and meta["Version"] == project["version"] == fragrel_integrations.__version__
    assert meta["Requires-Python"] == project["requires-python"]
    assert meta["License-Expression"] == "MIT" and meta.get_all("License-File") == ["LICENSE"]
    assert meta["Summary"] and meta["Description-Content-Type"] == "text/markdown"
    assert "FragRel" in meta.get_payload()  # the README is the long description
    extras = set(meta.get_all("Provides-Extra"))
    assert {"langchain", "llama-index", "embed", "local", "code", "all"} <= extras
    requires = meta.get_all("Requires-Dist")
    assert any(r.startswith("numpy") for r in requires)
    assert any(r.startswith("langchain-core") and 'extra == "langchain"' in r for r in requires)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    with zipfile.ZipFile(dists["wheel"]) as wheel:
        assert "fragrel = fragrel_integrations.crash_guard:main" in wheel.read(entry_points).decode()


def test_twine_accepts_both_distributions(dists):
    pytest.importorskip("twine")
    run = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(dists["wheel"]), str(dists["sdist"])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.stdout.count("PASSED") == 2


def test_classifiers_say_typed_and_python_3_only(dists):
    with zipfile.ZipFile(dists["wheel"]) as wheel:
        meta_name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(wheel.read(meta_name).decode())
    classifiers = meta.get_all("Classifier")
    assert "Typing :: Typed" in classifiers and "Programming Language :: Python :: 3 :: Only" in classifiers


def test_wheel_ships_py_typed_and_only_the_package(dists):
    with zipfile.ZipFile(dists["wheel"]) as wheel:
        names = wheel.namelist()
    assert "fragrel_integrations/py.typed" in names
    license_name = next(n for n in names if n.endswith(".dist-info/licenses/LICENSE"))
    with zipfile.ZipFile(dists["wheel"]) as wheel:
        text = wheel.read(license_name).decode()
    assert text.startswith("MIT License") and "fragrel-integrations contributors" in text
    assert "fragrel_integrations/langchain/retriever.py" in names
    assert "fragrel_integrations/core/code/graph.py" in names
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == {"fragrel_integrations", "llama_index"}
    # llama_index is LlamaIndex's PEP 420 namespace: we add only <kind>/fragrel/, never an __init__ above it
    ours = sorted(n for n in names if n.startswith("llama_index/"))
    assert ours == sorted(f"{ns.replace('.', '/')}/__init__.py" for ns in NAMESPACES)


def test_sdist_has_the_sources_readme_and_py_typed(dists):
    with tarfile.open(dists["sdist"]) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert {
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "fragrel_integrations/py.typed",
        "fragrel_integrations/cli.py",
    } <= names


def test_pyproject_has_llamahub_metadata_for_every_namespace_class():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["llamahub"]
    assert meta["import_path"] in NAMESPACES and meta["contains_example"] is False
    assert set(meta["class_authors"]) == {name for names in NAMESPACES.values() for name in names} - {
        "VectorStoreStreamIndex"  # a helper of SCMMemory, not an integration class
    }


# What runs in the fresh environments: every namespace re-exports the very classes of fragrel_integrations.
CHECK = """
import importlib, json, sys
import fragrel_integrations, fragrel_integrations.llama_index as li
spaces = json.loads(sys.argv[1])
for module, names in spaces.items():
    mod = importlib.import_module(module)
    assert sorted(mod.__all__) == sorted(names), (module, mod.__all__)
    for name in names:
        assert getattr(mod, name) is getattr(li, name), (module, name)
from llama_index.core import VectorStoreIndex  # LlamaIndex's own namespace is intact beside ours
print(fragrel_integrations.__file__)
"""


def _fresh_venv(tmp_path: Path, name: str) -> Path:
    """A new virtual environment without our package; its dependencies come from this interpreter's
    site-packages through a .pth path line (which, unlike site-packages itself, runs no editable-install hooks)."""
    import sysconfig
    import venv

    env = tmp_path / name
    venv.EnvBuilder(with_pip=False).create(env)
    python = env / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(purelib, "_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    return python


def _pip(python: Path, *args: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]


def _check(python: Path, cwd: Path) -> str:
    import json

    run = subprocess.run(
        [str(python), "-c", textwrap.dedent(CHECK), json.dumps(NAMESPACES)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd)},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout.strip()


@pytest.mark.slow
def test_llama_index_namespaces_import_from_the_wheel_in_a_fresh_venv(dists, tmp_path):
    pytest.importorskip("llama_index.core")
    python = _fresh_venv(tmp_path, "wheel-env")
    _pip(python, str(dists["wheel"]))
    origin = Path(_check(python, tmp_path))
    assert tmp_path / "wheel-env" in origin.parents  # the installed wheel, not a source tree


@pytest.mark.slow
def test_llama_index_namespaces_import_from_an_editable_install(dists, tmp_path):
    pytest.importorskip("llama_index.core")
    python = _fresh_venv(tmp_path, "editable-env")
    _pip(python, "--no-build-isolation", "-e", str(dists["src"]))
    origin = Path(_check(python, tmp_path))
    assert dists["src"] / "fragrel_integrations" in origin.parents  # the source tree itself
