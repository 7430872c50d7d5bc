"""The README cannot drift: every ```python block runs as written, offline, in its own process, and every ```bash
block parses and names commands, files, extras and CLI options that exist.

The python blocks run in a scratch folder laid out like the repository's neighbourhood: ``../shared/data/...``
holds a short story at the path of the book the README reads (small data, so the embedded models finish in
seconds), ``path/to/repo`` a small Python repository. Only the embedded models are used; the network is not.
A block preceded by ``<!-- readme-test: skip REASON -->`` is skipped with that reason (blocks that need a server).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

import fragrel_integrations

ROOT = Path(fragrel_integrations.__file__).resolve().parent.parent
README = ROOT / "README.md"
BOOK = "../shared/data/babilong/noise_books/Robinson_Crusoe_pg521.txt"
MAX_SKIPS = 0  # blocks allowed to opt out; raise only with a reason in the README comment

_FENCE = re.compile(r"^```(\w*)\s*$")
_SKIP = re.compile(r"^<!--\s*readme-test:\s*skip\s+(.+?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    lang: str
    line: int  # 1-based line of the opening fence
    code: str
    skip: str | None


def readme_blocks(text: str) -> list[Block]:
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
            raise ValueError(f"README.md line {i + 1}: the code block is never closed")
        above = i - 1
        while above >= 0 and not lines[above].strip():
            above -= 1
        skip = _SKIP.match(lines[above]) if above >= 0 else None
        blocks.append(Block(opening.group(1), i + 1, "\n".join(lines[i + 1 : end]) + "\n", skip and skip.group(1)))
        i = end + 1
    return blocks


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))
PYTHON = [b for b in BLOCKS if b.lang == "python"]
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


@pytest.mark.parametrize("block", PYTHON, ids=[f"line{b.line}" for b in PYTHON])
def test_python_block_is_complete_and_formatted(block: Block):
    """Fast check (the slow test below runs them): no undefined name or missing import, ruff-formatted."""
    beside = Path(sys.executable).with_name("ruff")  # the venv's, when it is not activated
    ruff = str(beside) if beside.is_file() else shutil.which("ruff") or pytest.skip("ruff is not installed")
    lint = [ruff, "check", "--no-cache", "--isolated", "--select", "E,F,W,I", "--line-length", "120", "-"]
    out = subprocess.run(lint, input=block.code, capture_output=True, text=True)
    assert out.returncode == 0, f"README.md line {block.line}:\n{out.stdout}"
    form = [ruff, "format", "--no-cache", "--isolated", "--line-length", "120", "--diff", "-"]
    out = subprocess.run(form, input=block.code, capture_output=True, text=True)
    assert out.returncode == 0, f"README.md line {block.line}:\n{out.stdout}"


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
STORY = """Chapter one. I was born in the year 1632, in the city of York, of a good family. My father, a wise man,
gave me serious counsel against the sea, but I would be satisfied with nothing but going to sea. The ship was
wrecked in a storm and every man was lost but me; the waves threw me upon the shore of an island.
Chapter two. I built a hut near the hill and fenced it with stakes. I kept a calendar on a great post and cut a
notch for every day. I planted barley and rice and tamed goats for milk and meat. My parrot Poll learned to
speak my name.
Chapter three. One day I saw the print of a man's naked foot on the sand, and I was terribly frightened. Years
later cannibals landed on the island with prisoners. One prisoner escaped and ran towards my hill; I shot one
pursuer and struck down the other. The savage I rescued knelt before me. I called him Friday, for it was on a
Friday that I saved his life, and I taught him to say Master.
Chapter four. An English ship came to the island, whose crew had mutinied. The mutineers had bound the captain.
Friday and I set the captain free, and the captain killed the leader of the mutineers with his own hand. The
captain took me and Friday home to England after twenty-eight years on the island.
"""

REPO_FILES = {
    "pkg/__init__.py": "",
    "pkg/config.py": textwrap.dedent(
        '''
        import json


        def load_config(path):
            """Read a JSON configuration file."""
            with open(path) as f:
                return json.load(f)
        '''
    ),
    "pkg/app.py": textwrap.dedent(
        """
        from .config import load_config


        def main(path):
            config = load_config(path)
            return config["name"]
        """
    ),
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A scratch working directory whose ``../shared/data`` holds the small book and ``path/to/repo`` a repo."""
    top = tmp_path_factory.mktemp("readme")
    work = top / "work"
    work.mkdir()
    book = top / BOOK.removeprefix("../")
    book.parent.mkdir(parents=True)
    book.write_text(STORY, encoding="utf-8")  # about 330 words
    for name, text in REPO_FILES.items():
        path = work / "path" / "to" / "repo" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return work


@pytest.mark.slow
@pytest.mark.parametrize("block", PYTHON, ids=[f"line{b.line}" for b in PYTHON])
def test_python_block_runs_as_written(block: Block, workspace: Path):
    if block.skip:
        pytest.skip(block.skip)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    for key in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):  # nothing may reach a hosted model
        env.pop(key, None)
    run = subprocess.run(
        [sys.executable, "-c", block.code],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, f"README.md line {block.line}:\n{block.code}\n{run.stderr[-4000:]}"
