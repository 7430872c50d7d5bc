"""Small real repositories for the code tests, written into a temporary folder."""

from __future__ import annotations

import os
from pathlib import Path

# pkg/a.py calls g() defined in pkg/b.py through a relative import. The hand-checked values in
# test_code_graph.py / test_code_relation.py depend on these exact texts: do not reformat them.
A_PY = "from .b import g\n\n\ndef f():\n    return g()\n"
B_PY = "def g():\n    return 1\n"
CYCLE_PY = "def ping(n):\n    return pong(n - 1)\n\n\ndef pong(n):\n    return ping(n + 1)\n"
BROKEN_PY = "from .b import g\n\ndef broken(:\n    pass\n\n\ndef ok():\n    return g()\n"
LATIN_BYTES = b"# caf\xe9 cr\xe8me\nfrom .b import g\n\n\ndef k():\n    return g()\n"
CLASS_PY = (
    "import pkg.b as bb\n"
    "from . import cycle\n"
    "\n"
    "\n"
    "class Runner:\n"
    "    def run(self):\n"
    "        return self.step() + bb.g()\n"
    "\n"
    "    def step(self):\n"
    "        return cycle.ping(3)\n"
)
SECRET = "SECRET_TOKEN = 'must never be indexed'\n"


def make_python_repo(tmp_path: Path) -> Path:
    """``repo/pkg`` with cross-file calls, a call cycle, a syntax error, a latin-1 file and symlinks out."""
    root = tmp_path / "repo"
    pkg = root / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(A_PY)
    (pkg / "b.py").write_text(B_PY)
    (pkg / "cycle.py").write_text(CYCLE_PY)
    (pkg / "broken.py").write_text(BROKEN_PY)
    (pkg / "latin.py").write_bytes(LATIN_BYTES)
    (pkg / "runner.py").write_text(CLASS_PY)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text(SECRET)
    os.symlink(outside / "secret.py", pkg / "leak.py")
    os.symlink(outside, root / "linked")
    return root


def make_polyglot_repo(tmp_path: Path) -> Path:
    """JavaScript, TypeScript, Java and Go files with in-file and cross-file calls."""
    root = tmp_path / "poly"
    files = {
        "web/a.js": "import {b as bb} from './b';\nconst c = require('./c');\n"
        "export default function main() { return bb() + c.cc(); }\n",
        "web/b.ts": "export function b(): number { return helper(); }\nfunction helper(): number { return 1; }\n",
        "web/c.js": "function cc() { return 2; }\nmodule.exports = {cc};\n",
        "web/k.js": "class K {\n  run() { return this.step(); }\n  step() { return 1; }\n}\nnew K().run();\n",
        "java/a/b/K.java": "package a.b;\nimport a.b.util.U;\n"
        "class K { void m() { U.s(); new U(); n(); } void n() {} }\n",
        "java/a/b/util/U.java": "package a.b.util;\npublic class U { public static void s() {} }\n",
        "go/main.go": 'package main\nimport "example.com/m/go/util"\nfunc main() { util.F(); h() }\nfunc h() {}\n',
        "go/util/u.go": "package util\nfunc F() {}\n",
    }
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root
