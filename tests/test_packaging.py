"""Release readiness: the sdist and the wheel build from the source tree, their metadata is complete and the
wheel ships ``py.typed`` (PEP 561), the MIT ``LICENSE`` and the package code, but no tests or benchmarks."""

from __future__ import annotations

import email.parser
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

import fragrel_integrations

pytest.importorskip("build")

ROOT = Path(fragrel_integrations.__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> dict[str, Path]:
    """sdist + wheel built (without build isolation: offline, the venv's setuptools) from a copy of the tree."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "fragrel_integrations",
        src / "fragrel_integrations",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    out = src / "dist"
    run = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--wheel", "--no-isolation", "--outdir", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return {"wheel": next(out.glob("*.whl")), "sdist": next(out.glob("*.tar.gz"))}


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
        assert "fragrel = fragrel_integrations.cli:main" in wheel.read(entry_points).decode()


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
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == {"fragrel_integrations"}  # no tests/


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
