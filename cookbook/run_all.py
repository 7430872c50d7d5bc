"""Regenerate the cookbook's stored outputs: run each notebook top to bottom with nbclient, offline on the
embedded models, and write it back with the outputs of that run.

    python cookbook/run_all.py                      # every notebook in cookbook/
    python cookbook/run_all.py scm_memory.ipynb     # only these

Run it from the repository's virtual environment (``pip install -e '.[all,test]'``; the plots need matplotlib,
part of the ``test`` extra). Each notebook runs in ``cookbook/``, as Jupyter runs it, and reads ``../samples/``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

COOKBOOK = Path(__file__).resolve().parent


def execute(path: Path, timeout: int = 900) -> nbformat.NotebookNode:
    """Run the notebook at ``path`` in ``cookbook/`` and return it with its outputs (the file is not changed).

    The kernel imports this checkout's package first (``PYTHONPATH``), offline (the embedded models only)."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", record_timing=False, resources={"metadata": {"path": str(COOKBOOK)}}
    )
    paths = [str(COOKBOOK.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    client.execute(env=env)
    return nb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="notebook file names in cookbook/ (default: all)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    args = parser.parse_args(argv)
    paths = [COOKBOOK / name for name in args.notebooks] or sorted(COOKBOOK.glob("*.ipynb"))
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        parser.error(f"no such notebook: {', '.join(missing)}")
    for path in paths:
        start = time.perf_counter()
        nb = execute(path, args.timeout)
        nbformat.write(nb, path)
        print(f"{path.name}: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
