"""A throw-away PostgreSQL server on 127.0.0.1 for tests and benchmarks (``initdb`` + ``pg_ctl``); not shipped.

Needs the server binaries (Debian: ``apt-get install -y postgresql``). PostgreSQL refuses to run as root, so
under root the server runs as the ``postgres`` system user. Trust authentication, loopback only, data in a
temporary folder removed by :meth:`TemporaryPostgres.stop`.

>>> with TemporaryPostgres() as pg:                                  # doctest: +SKIP
...     store = TripletStore(PostgresBackend(pg.url))
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["TemporaryPostgres", "find_pg_bin"]


def find_pg_bin() -> Path | None:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres`` (PATH first, then Debian's layout), or None."""
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(os.path.realpath(initdb)).parent
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if all(Path(folder, b).is_file() for b in ("initdb", "pg_ctl", "postgres")):
            return Path(folder)
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TemporaryPostgres:
    """Start a private PostgreSQL cluster on a free loopback port; ``url`` connects to its ``postgres`` database.

    Args:
        fsync: keep PostgreSQL's fsync on (default). Tests may turn it off for speed; benchmarks should not.
        startup_timeout: seconds to wait for the server to accept connections.
    """

    def __init__(self, *, fsync: bool = True, startup_timeout: float = 60.0, user: str = "fragrel") -> None:
        self.fsync = fsync
        self.startup_timeout = startup_timeout
        self.user = user
        self.port: int | None = None
        self.datadir: Path | None = None
        self._run_as: tuple[int, int] | None = None
        self._bin = find_pg_bin()

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("the server is not running; call start() first")
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        kwargs = {}
        if self._run_as is not None:
            kwargs = {"user": self._run_as[0], "group": self._run_as[1], "extra_groups": []}
        return subprocess.run(
            list(args), capture_output=True, text=True, check=check, cwd=str(self.datadir.parent), **kwargs
        )

    def start(self) -> TemporaryPostgres:
        if self._bin is None:
            raise FileNotFoundError(
                "PostgreSQL server binaries (initdb, pg_ctl) not found; install them with "
                "`apt-get update && apt-get install -y postgresql`"
            )
        root = Path(tempfile.mkdtemp(prefix="fragrel-pg-"))
        self.datadir = root / "data"
        if os.geteuid() == 0:
            import pwd

            try:
                pw = pwd.getpwnam("postgres")
            except KeyError as exc:
                raise RuntimeError(
                    "running as root needs the 'postgres' system user (Debian's package creates it)"
                ) from exc
            self._run_as = (pw.pw_uid, pw.pw_gid)
            os.chown(root, pw.pw_uid, pw.pw_gid)
        try:
            self._run(
                str(self._bin / "initdb"), "-D", str(self.datadir), "-U", self.user, "--auth=trust",
                "-E", "UTF8", "--locale=C", "--no-sync",
            )  # fmt: skip
            self.port = _free_port()
            opts = f"-p {self.port} -k {root} -c listen_addresses=127.0.0.1 -c fsync={'on' if self.fsync else 'off'}"
            self._run(
                str(self._bin / "pg_ctl"), "-D", str(self.datadir), "-o", opts, "-l", str(root / "server.log"),
                "-w", "-t", str(int(self.startup_timeout)), "start",
            )  # fmt: skip
        except subprocess.CalledProcessError as exc:
            log = (root / "server.log").read_text(errors="replace")[-2000:] if (root / "server.log").exists() else ""
            self._cleanup(root)
            raise RuntimeError(f"could not start PostgreSQL: {exc.stderr or exc.stdout}\n{log}") from exc
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"PostgreSQL did not listen on 127.0.0.1:{self.port} within {self.startup_timeout}s")

    def stop(self) -> None:
        if self.datadir is None:
            return
        root = self.datadir.parent
        if self.port is not None:
            self._run(str(self._bin / "pg_ctl"), "-D", str(self.datadir), "-m", "fast", "-w", "stop", check=False)
        self.port = None
        self._cleanup(root)
        self.datadir = None

    @staticmethod
    def _cleanup(root: Path) -> None:
        shutil.rmtree(root, ignore_errors=True)

    def __enter__(self) -> TemporaryPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
