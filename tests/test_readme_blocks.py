"""The README cannot drift: every ```python block runs as written, offline, in its own process, from the root of
a fresh ``git clone`` of the repository with nothing beside it, and every ```bash block parses and names commands,
files, extras and CLI options that exist (the book ``fragrel ask`` reads is in the clone).

The clone is of the committed ``HEAD``: commit a README change before running the slow test (a block that is not in
the committed README fails and says so). Only the embedded models are used; the network is not. A block preceded
by ``<!-- readme-test: skip REASON -->`` is skipped with that reason (blocks that need a server).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

import fragrel_integrations

ROOT = Path(fragrel_integrations.__file__).resolve().parent.parent
README = ROOT / "README.md"
BOOK = "samples/robinson_crusoe.txt"  # the book the README's commands and blocks read, inside the repository
MAX_SKIPS = 0  # blocks allowed to opt out; raise only with a reason in the README comment

_FENCE = re.compile(r"^```(\w*)\s*$")
_SKIP = re.compile(r"^<!--\s*readme-test:\s*skip\s+(.+?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    lang: str
    line: int  # 1-based line of the opening fence
    code: str
    skip: str | None
    source: str = "README.md"  # the file, relative to the repository root


def readme_blocks(text: str, source: str = "README.md") -> list[Block]:
    """The fenced blocks of ``text`` in order, with the skip reason of a ``readme-test`` comment just above."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ValueError(f"{source} line {i + 1}: the code block is never closed")
        above = i - 1
        while above >= 0 and not lines[above].strip():
            above -= 1
        skip = _SKIP.match(lines[above]) if above >= 0 else None
        code = "\n".join(lines[i + 1 : end]) + "\n"
        blocks.append(Block(opening.group(1), i + 1, code, skip and skip.group(1), source))
        i = end + 1
    return blocks


#: The README and the pages it sends readers to: their python blocks run too.
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))
PYTHON = [
    b
    for page in PAGES
    for b in readme_blocks(page.read_text(encoding="utf-8"), str(page.relative_to(ROOT)))
    if b.lang == "python"
]
SHELL = [b for b in BLOCKS if b.lang in ("bash", "sh", "shell", "console")]


def test_readme_blocks_are_all_checked():
    assert len(PYTHON) >= 8 and len(SHELL) >= 2
    assert {b.lang for b in BLOCKS} <= {"python", "bash"}, "a block in a language this test does not check"
    skipped = [b for b in BLOCKS if b.skip]
    assert len(skipped) <= MAX_SKIPS, [(b.line, b.skip) for b in skipped]


def test_block_parser_reads_fences_and_skip_comments():
    text = "x\n<!-- readme-test: skip needs a server -->\n\n```python\na = 1\n```\n```bash\nls\n```\n"
    first, second = readme_blocks(text)
    assert (first.lang, first.line, first.code, first.skip) == ("python", 4, "a = 1\n", "needs a server")
    assert (second.lang, second.code, second.skip) == ("bash", "ls\n", None)
    with pytest.raises(ValueError, match="never closed"):
        readme_blocks("```python\nx = 1\n")


@pytest.mark.parametrize("block", PYTHON, ids=[f"{b.source}:{b.line}" for b in PYTHON])
def test_python_block_is_complete_and_formatted(block: Block):
    """Fast check (the slow test below runs them): no undefined name or missing import, ruff-formatted."""
    beside = Path(sys.executable).with_name("ruff")  # the venv's, when it is not activated
    ruff = str(beside) if beside.is_file() else shutil.which("ruff") or pytest.skip("ruff is not installed")
    lint = [ruff, "check", "--no-cache", "--isolated", "--select", "E,F,W,I", "--line-length", "120", "-"]
    out = subprocess.run(lint, input=block.code, capture_output=True, text=True)
    assert out.returncode == 0, f"{block.source} line {block.line}:\n{out.stdout}"
    form = [ruff, "format", "--no-cache", "--isolated", "--line-length", "120", "--diff", "-"]
    out = subprocess.run(form, input=block.code, capture_output=True, text=True)
    assert out.returncode == 0, f"{block.source} line {block.line}:\n{out.stdout}"


# ------------------------------------------------------------------------------------------------ shell blocks
def _commands(code: str) -> list[list[str]]:
    """Simple commands of a shell block (split at ``&&``, ``||``, ``;`` and ``|``)."""
    out = []
    for part in re.split(r"&&|\|\||;|\|", code.replace("\\\n", " ")):
        words = shlex.split(part)
        if words:
            out.append(words)
    return out


@pytest.mark.parametrize("block", SHELL, ids=[f"line{b.line}" for b in SHELL])
def test_shell_block_parses_and_names_what_exists(block: Block):
    if block.skip:
        pytest.skip(block.skip)
    syntax = subprocess.run(["bash", "-n"], input=block.code, capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = set(pyproject["project"]["optional-dependencies"])
    ci = (ROOT / ".ci" / "run").read_text()
    from fragrel_integrations.cli import build_parser

    for words in _commands(block.code):
        name, args = words[0], words[1:]
        if name == "fragrel":
            try:
                build_parser().parse_args(args)
            except SystemExit as exc:  # argparse rejects unknown subcommands and options
                pytest.fail(f"README.md line {block.line}: `{shlex.join(words)}` is not a valid fragrel command: {exc}")
            if args[0] in ("ask", "retrieve"):
                assert args[1] == BOOK, "the README's book path changed: update BOOK here"
        elif name == "bash":
            assert (ROOT / args[0]).is_file(), f"README.md line {block.line}: {args[0]} does not exist"
        elif name == "pip" and args[0] == "install":
            for spec in args[1:]:
                if spec.startswith("torch=="):  # the pin must be the one CI installs (the CPU build)
                    assert f"pip install -q {spec}" in ci
                for extra in re.findall(r"\[([^\]]+)\]", spec):
                    assert set(extra.split(",")) <= extras, f"README.md line {block.line}: unknown extra in {spec}"


# ------------------------------------------------------------------------------------------------ python blocks
def _git(*args: str, cwd: Path) -> str:
    run = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"git {' '.join(args)}: {run.stderr}"
    return run.stdout.strip()


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A fresh ``git clone`` of the repository's committed HEAD, alone in a new temporary folder."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the README test clones the repository")
    head = _git("rev-parse", "HEAD", cwd=ROOT)
    dest = tmp_path_factory.mktemp("fresh") / "fragrel-integrations"
    _git("clone", "--quiet", str(ROOT), str(dest), cwd=dest.parent)
    if _git("rev-parse", "HEAD", cwd=dest) != head:  # e.g. a detached HEAD in CI that no branch points to
        _git("fetch", "--quiet", str(ROOT), head, cwd=dest)
        _git("checkout", "--quiet", head, cwd=dest)
    assert sorted(p.name for p in dest.parent.iterdir()) == ["fragrel-integrations"]  # nothing beside it
    return dest


def test_the_clone_holds_what_the_readme_reads(clone: Path):
    """The path the first command gives ``fragrel ask`` (and every ``fragrel`` file argument) exists in a clone."""
    first = next(words for block in SHELL for words in _commands(block.code) if words[0] == "fragrel")
    assert first[1] == "ask", f"the README's first fragrel command is {shlex.join(first)}"
    for words in (w for block in SHELL for w in _commands(block.code) if w[0] == "fragrel"):
        if words[1] in ("ask", "retrieve"):
            assert (clone / words[2]).is_file(), f"{words[2]} is not in a fresh clone of the repository"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = "import fragrel_integrations; print(fragrel_integrations.__file__)"
    where = subprocess.run([sys.executable, "-c", code], cwd=clone, env=env, capture_output=True, text=True)
    assert Path(where.stdout.strip()).is_relative_to(clone), "the blocks would not run the clone's own package"
    for page in PAGES:
        committed = readme_blocks((clone / page.relative_to(ROOT)).read_text(encoding="utf-8"))
        for block in [b for b in committed if b.lang == "python"]:
            assert "../" not in block.code, f"{page.name} line {block.line} reads outside the repository"
        assert "../shared" not in (clone / page.relative_to(ROOT)).read_text(encoding="utf-8"), page.name


@pytest.mark.slow
@pytest.mark.parametrize("block", PYTHON, ids=[f"{b.source}:{b.line}" for b in PYTHON])
def test_python_block_runs_as_written(block: Block, clone: Path):
    if block.skip:
        pytest.skip(block.skip)
    page = clone / block.source
    committed = {b.code for b in readme_blocks(page.read_text(encoding="utf-8"))} if page.is_file() else set()
    if block.code not in committed:
        pytest.fail(f"{block.source} line {block.line} is not committed: commit it, this test runs a clone of HEAD")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    for key in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PYTHONPATH"):  # no hosted model; the clone's own package
        env.pop(key, None)
    run = subprocess.run(
        [sys.executable, "-c", block.code],  # -c puts the working directory (the clone) first on sys.path
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,  # a hang guard: a whole-book block takes about a minute alone, far more on a loaded machine
    )
    assert run.returncode == 0, f"{block.source} line {block.line}:\n{block.code}\n{run.stderr[-4000:]}"
