"""The ``fragrel`` command's entry point: the command runs in a child process, and a child killed by a signal
(a model runtime that faults, e.g. ``Illegal instruction`` from a native build using CPU instructions the host
cannot run) is reported in one line that names the fix, with exit status 128 + the signal, instead of a bare
signal. Importing this module loads nothing but the standard library.

>>> describe_crash(0) is None
True
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Sequence

__all__ = ["describe_crash", "main", "supervise"]

_FIX = (
    "the embedded models need no native build: reinstall with `pip install -e '.[all]'` (TransformersChatModel), "
    "or put a model server behind the same command with --base-url/--model"
)


def describe_crash(returncode: int) -> str | None:
    """One line for a child that ended with ``returncode``; None when it was not killed by a signal.

    >>> describe_crash(-signal.SIGILL).startswith("fragrel: error: the model runtime crashed (Illegal instruction")
    True
    """
    if returncode >= 0:
        return None
    try:
        name = signal.strsignal(-returncode) or f"signal {-returncode}"
    except ValueError:
        name = f"signal {-returncode}"
    return f"fragrel: error: the model runtime crashed ({name}, signal {-returncode}); {_FIX}"


def supervise(command: Sequence[str]) -> int:
    """Run ``command`` with this process's streams; its exit status, or 128 + signal with one line on stderr."""
    child = subprocess.Popen(list(command))
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the child, which ends itself
    try:
        code = child.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    line = describe_crash(code)
    if line is None:
        return code
    print(line, file=sys.stderr)
    return 128 - code


def main() -> int:
    """``fragrel ARGS``: ``python -m fragrel_integrations.cli ARGS`` in a child process, supervised."""
    return supervise([sys.executable, "-m", "fragrel_integrations.cli", *sys.argv[1:]])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
