"""Walk a repository: the source files to index, and every file left out with the reason.

Rules (all configurable through :func:`load_repository`):

- only files whose extension names a supported language (see :data:`LANGUAGES`);
- folders in ``exclude_dirs`` (``.git``, ``node_modules``, ``vendor``, ``__pycache__``, build outputs, virtual
  environments, ...) and hidden folders are not entered;
- symlinks are never followed: a link pointing outside the root is reported as such, a link whose target is
  inside the root is reported as a duplicate (its target is indexed under its own path);
- only regular files are read (FIFOs, sockets and devices are skipped and reported, never opened for a blocking
  read); an unreadable file or folder is skipped and reported;
- files over ``max_file_bytes`` (1 MB) or ``max_file_lines`` (20,000 lines: indexing work grows with the lines
  of a file), binary files (a NUL byte in the first 8 KiB, without a UTF-16/32 byte-order mark) and generated
  files (minified JavaScript, protobuf output, Go's ``Code generated ... DO NOT EDIT.`` header) are skipped; every
  skip is reported (a warning for the ones a user would not expect: unreadable, special, over a cap, binary,
  undecodable);
- folders are walked without recursion, so any depth of nesting is read;
- text with a UTF-32 or UTF-16 byte-order mark is decoded as such; other text as UTF-8 (a BOM is dropped); a file
  that is not valid UTF-8 is decoded with ``fallback_encoding`` (latin-1 by default, which never fails); both are
  reported in ``Repository.fallback_decoded``; with ``fallback_encoding=None`` such a file is skipped and
  reported.
"""

from __future__ import annotations

import codecs
import hashlib
import logging
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..._validation import check_positive_int

__all__ = [
    "DEFAULT_EXCLUDE_DIRS", "DEFAULT_MAX_FILE_BYTES", "DEFAULT_MAX_FILE_LINES", "LANGUAGES", "Repository",
    "SkippedFile", "SourceFile", "decode_source", "language_for_path", "load_repository", "read_source_file",
    "wide_codec"
]  # fmt: skip

logger = logging.getLogger(__name__)

#: Language name -> file extensions (lower case) parsed with that language's tree-sitter grammar.
LANGUAGES: dict[str, tuple[str, ...]] = {
    "python": (".py",),
    "javascript": (".js", ".mjs", ".cjs", ".jsx"),
    "typescript": (".ts", ".mts", ".cts"),
    "tsx": (".tsx",),
    "java": (".java",),
    "go": (".go",),
}
_EXT_TO_LANGUAGE = {ext: lang for lang, exts in LANGUAGES.items() for ext in exts}

#: Folder names never entered (vendored code, build outputs, caches, virtual environments, VCS metadata).
DEFAULT_EXCLUDE_DIRS: frozenset[str] = frozenset(
    {".git", ".hg", ".svn", "__pycache__", "node_modules", "bower_components", "vendor", "third_party"}
    | {"site-packages", "build", "dist", "target", "venv", ".venv", ".tox", ".nox", ".eggs", ".mypy_cache"}
    | {".pytest_cache", ".ruff_cache", ".idea", ".vscode"}
)
_GENERATED_SUFFIXES = (".min.js", ".bundle.js", "_pb2.py", "_pb2_grpc.py", ".pb.go", ".pb.gw.go")
_BINARY_PROBE = 8192
#: Default caps (see :func:`load_repository`): indexing work grows with the lines of a file and of a folder.
DEFAULT_MAX_FILE_BYTES = 1_000_000
DEFAULT_MAX_FILE_LINES = 20_000
#: Skip reasons worth a warning (a user would expect the file indexed, or a file named like source is not text);
#: symlinks and generated files are left out by design and only logged at debug level.
_NOTABLE = ("unreadable", "not a regular file", "larger than", "more than", "not UTF-8", "not valid UTF", "binary")
#: Byte-order marks of the encodings whose text holds NUL bytes, UTF-32 first (FF FE 00 00 starts with FF FE);
#: a BOM of ``n`` bytes is that of UTF-``8n``.
_WIDE_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)


@dataclass(frozen=True, slots=True)
class SourceFile:
    """A decoded source file. ``path`` is relative to the repository root, with ``/`` separators."""

    path: str
    language: str
    text: str
    encoding: str = "utf-8"

    @property
    def sha1(self) -> str:
        """Content hash of the decoded text (what the persisted index compares to find changed files)."""
        return hashlib.sha1(self.text.encode("utf-8", "surrogatepass")).hexdigest()

    @property
    def n_lines(self) -> int:
        """Lines as tree-sitter counts them (``\n`` only; a last line without ``\n`` counts)."""
        return self.text.count("\n") + (1 if self.text and not self.text.endswith("\n") else 0)


@dataclass(frozen=True, slots=True)
class SkippedFile:
    """A file or folder entry the loader left out, and why."""

    path: str
    reason: str


@dataclass
class Repository:
    """What :func:`load_repository` found: the files to index and the ones it left out."""

    root: Path
    files: list[SourceFile] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)

    @property
    def fallback_decoded(self) -> list[str]:
        """Paths of files not decoded as UTF-8: UTF-16/32 (by their byte-order mark) or the fallback encoding."""
        return [f.path for f in self.files if f.encoding != "utf-8"]

    @property
    def n_lines(self) -> int:
        return sum(f.n_lines for f in self.files)

    def __len__(self) -> int:
        return len(self.files)


def language_for_path(path: str | os.PathLike[str]) -> str | None:
    """The language of a file from its extension, or None.

    >>> language_for_path("pkg/mod.py"), language_for_path("app.tsx"), language_for_path("README.md")
    ('python', 'tsx', None)
    """
    return _EXT_TO_LANGUAGE.get(os.path.splitext(str(path))[1].lower())


def decode_source(data: bytes, fallback_encoding: str | None = "latin-1") -> tuple[str, str] | None:
    """``(text, encoding)``: UTF-32 or UTF-16 when the data starts with their byte-order mark (BOM dropped; None
    if it does not decode), else UTF-8 (BOM dropped) first, then ``fallback_encoding``; None if neither decodes.

    >>> decode_source("café".encode("utf-8")), decode_source("café".encode("latin-1"))
    (('café', 'utf-8'), ('café', 'latin-1'))
    >>> decode_source("x = 1".encode("utf-16"))
    ('x = 1', 'utf-16')
    """
    wide = wide_codec(data)
    tries = [(wide, wide)] if wide else [("utf-8-sig", "utf-8"), (fallback_encoding, fallback_encoding)]
    for codec, name in tries:
        if codec is None:  # no fallback encoding
            break
        try:
            return data.decode(codec), name
        except (UnicodeDecodeError, LookupError):
            pass
    return None


def wide_codec(data: bytes) -> str | None:
    """``"utf-32"`` or ``"utf-16"`` when ``data`` starts with that encoding's byte-order mark, else None: such text
    holds NUL bytes and must not be taken for binary.

    >>> wide_codec("x".encode("utf-16")), wide_codec(b"x")
    ('utf-16', None)
    """
    return next((f"utf-{8 * len(bom)}" for bom in _WIDE_BOMS if data.startswith(bom)), None)


def _is_generated(rel: str, head: bytes) -> bool:
    name = rel.rsplit("/", 1)[-1].lower()
    return name.endswith(_GENERATED_SUFFIXES) or (b"Code generated" in head[:2048] and b"DO NOT EDIT" in head[:2048])


_FILE_KINDS = {
    stat.S_IFDIR: "folder",
    stat.S_IFIFO: "FIFO",
    stat.S_IFSOCK: "socket",
    stat.S_IFCHR: "character device",
    stat.S_IFBLK: "block device",
    stat.S_IFLNK: "symlink",
}


def _file_kind(mode: int) -> str:
    return _FILE_KINDS.get(stat.S_IFMT(mode), "special file")


def _read_regular(full: Path, max_file_bytes: int) -> bytes | str:
    """The bytes of ``full`` when it is a regular file of at most ``max_file_bytes``, else why it is left out.

    The file is opened without following a symlink and without blocking, and its type and size are checked again
    on the open descriptor, so a FIFO, device or link swapped in after the walk cannot hang or escape the read;
    at most ``max_file_bytes + 1`` bytes are read (a file growing meanwhile cannot exceed the cap).
    """
    try:
        st = os.lstat(full)
        if not stat.S_ISREG(st.st_mode):
            return f"not a regular file ({_file_kind(st.st_mode)})"
        if st.st_size > max_file_bytes:
            return f"larger than max_file_bytes={max_file_bytes}"
        with open(os.open(full, _OPEN_FLAGS), "rb", closefd=True) as fh:
            mode = os.fstat(fh.fileno()).st_mode
            if not stat.S_ISREG(mode):
                return f"not a regular file ({_file_kind(mode)})"
            data = fh.read(max_file_bytes + 1)
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    if len(data) > max_file_bytes:
        return f"larger than max_file_bytes={max_file_bytes}"
    return data


def _inside(root: Path, link: Path) -> bool:
    target = link.resolve()
    return target == root or root in target.parents


def _check_languages(languages: Iterable[str] | None) -> frozenset[str]:
    if languages is None:
        return frozenset(LANGUAGES)
    chosen = frozenset([languages] if isinstance(languages, str) else languages)
    if unknown := chosen - LANGUAGES.keys():
        raise ValueError(f"unknown language(s) {sorted(unknown)}; choose from {sorted(LANGUAGES)}")
    return chosen


def read_source_file(
    root: str | os.PathLike[str],
    rel_path: str,
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    max_file_lines: int = DEFAULT_MAX_FILE_LINES,
    fallback_encoding: str | None = "latin-1",
    languages: Iterable[str] | None = None,
) -> SourceFile | SkippedFile:
    """Read one file of the repository (relative ``rel_path``) under the loader's rules.

    Returns a :class:`SourceFile`, or a :class:`SkippedFile` saying why it is left out (missing, unreadable,
    not a regular file, over a cap, binary, generated, undecodable). Never raises for the file's content or type.
    """
    check_positive_int(max_file_bytes, "max_file_bytes")
    check_positive_int(max_file_lines, "max_file_lines")
    if "\x00" in str(rel_path):
        raise ValueError(f"{rel_path!r} holds a NUL character: give the path of a file inside the repository")
    root_path = Path(root).resolve()
    rel = PurePosixPath(str(rel_path).replace(os.sep, "/")).as_posix()
    if rel.startswith("../") or rel == ".." or PurePosixPath(rel).is_absolute():
        raise ValueError(f"{rel_path!r} is not a path inside the repository: give it relative to the root")
    full = root_path / rel
    language = language_for_path(rel)
    if language is None or language not in _check_languages(languages):
        return SkippedFile(rel, "not a source file of an indexed language")
    if full.is_symlink():
        if _inside(root_path, full):
            return SkippedFile(rel, "symlink (its target inside the root is indexed under its own path)")
        return SkippedFile(rel, "symlink pointing outside the root")
    data = _read_regular(full, max_file_bytes)
    if isinstance(data, str):
        return SkippedFile(rel, data)
    wide = wide_codec(data) is not None  # UTF-16/32 text holds NUL bytes: decoded, not taken for binary
    if not wide and b"\x00" in data[:_BINARY_PROBE]:
        return SkippedFile(rel, "binary")
    if not wide and _is_generated(rel, data):
        return SkippedFile(rel, "generated")
    decoded = decode_source(data, fallback_encoding)
    if decoded is None:
        reason = "not valid UTF-16/32 after its byte-order mark" if wide else "not UTF-8"
        return SkippedFile(rel, f"{reason} and no fallback encoding decodes it")
    text, encoding = decoded
    if wide and _is_generated(rel, text[:2048].encode("utf-8", "replace")):
        return SkippedFile(rel, "generated")
    source = SourceFile(rel, language, text, encoding)
    if source.n_lines > max_file_lines:
        return SkippedFile(rel, f"more than max_file_lines={max_file_lines} lines")
    if encoding != "utf-8":
        logger.info("%s is not valid UTF-8; decoded as %s", rel, encoding)
    return source


def load_repository(
    root: str | os.PathLike[str],
    *,
    languages: Iterable[str] | None = None,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    max_file_lines: int = DEFAULT_MAX_FILE_LINES,
    exclude_dirs: Sequence[str] | frozenset[str] = DEFAULT_EXCLUDE_DIRS,
    include_hidden: bool = False,
    fallback_encoding: str | None = "latin-1",
) -> Repository:
    """Walk ``root`` and read every source file of ``languages`` (default: all of :data:`LANGUAGES`).

    Files come sorted by path. Nothing outside ``root`` is ever read (symlinks are not followed); only regular
    files are read (a FIFO, socket or device named ``*.py`` is skipped, never opened for a blocking read).
    ``max_file_bytes`` (default 1 MB) and ``max_file_lines`` (default 20,000) keep indexing bounded: a file over
    either cap is skipped. Every file or folder left out is reported in :attr:`Repository.skipped` with the reason
    (unreadable files and folders included), never silently dropped.

    >>> import tempfile, pathlib
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (pathlib.Path(d) / "a.py").write_text("x = 1\\n")
    ...     [f.path for f in load_repository(d).files]
    ['a.py']
    """
    root_path = Path(root)
    if not root_path.is_dir():
        raise ValueError(f"{str(root)!r} is not a directory: give the root folder of a repository")
    check_positive_int(max_file_bytes, "max_file_bytes")
    check_positive_int(max_file_lines, "max_file_lines")
    chosen = _check_languages(languages)
    root_path = root_path.resolve()
    excluded = frozenset(exclude_dirs)
    repo = Repository(root_path)

    stack = [root_path]
    while stack:  # pre-order without recursion (Python 3.11's os.walk recursed once per folder level)
        base = stack.pop()
        rel_dir = base.relative_to(root_path).as_posix()
        prefix = "" if rel_dir == "." else rel_dir + "/"
        dirnames, filenames = [], []
        try:
            with os.scandir(base) as entries:
                for entry in entries:
                    try:
                        is_dir = entry.is_dir()
                    except OSError:
                        is_dir = False
                    (dirnames if is_dir else filenames).append(entry.name)
        except OSError as exc:
            repo.skipped.append(SkippedFile(rel_dir, f"unreadable folder: {exc.strerror or exc}"))
            continue
        keep = []
        for d in sorted(dirnames):
            if (base / d).is_symlink():
                inside = _inside(root_path, base / d)
                reason = "symlinked folder (not followed)" if inside else "symlink pointing outside the root"
                repo.skipped.append(SkippedFile(prefix + d, reason))
            elif d not in excluded and (include_hidden or not d.startswith(".")):
                keep.append(d)
        stack += [base / d for d in reversed(keep)]
        for name in sorted(filenames):
            if language_for_path(name) not in chosen:
                continue
            item = read_source_file(
                root_path,
                prefix + name,
                max_file_bytes=max_file_bytes,
                max_file_lines=max_file_lines,
                fallback_encoding=fallback_encoding,
                languages=chosen,
            )
            (repo.files if isinstance(item, SourceFile) else repo.skipped).append(item)
    repo.files.sort(key=lambda f: f.path)
    repo.skipped.sort(key=lambda s: s.path)
    for s in repo.skipped:
        logger.debug("skipped %s: %s", s.path, s.reason)
    if notable := [s for s in repo.skipped if s.reason.startswith(_NOTABLE)]:
        shown = "; ".join(f"{s.path} ({s.reason})" for s in notable[:5])
        more = f"; and {len(notable) - 5} more" if len(notable) > 5 else ""
        logger.warning("left out %d source file(s) or folder(s): %s%s", len(notable), shown, more)
    return repo
