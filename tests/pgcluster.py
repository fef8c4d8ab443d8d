"""A throwaway PostgreSQL cluster for storage tests: ``initdb`` into a temporary folder (as the
``postgres`` user when run as root: initdb refuses root), ``pg_ctl start`` on a free loopback port
with password authentication over TCP, and ``stop`` at the end. Never a mock database."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

BIN_DIRS = [Path("/usr/lib/postgresql") / v / "bin" for v in ("17", "16", "15", "14")]
PASSWORD = "s3cret-pw-7Q"


def bindir() -> Path | None:
    """The PostgreSQL server binaries' folder, or None when no server is installed."""
    for d in BIN_DIRS:
        if (d / "initdb").is_file() and (d / "pg_ctl").is_file():
            return d
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A running cluster: ``url`` (``postgresql://postgres:PASSWORD@127.0.0.1:PORT/postgres``),
    ``port``; :meth:`stop` shuts it down and removes its folder."""

    def __init__(self) -> None:
        b = bindir()
        if b is None:
            raise RuntimeError("no PostgreSQL server binaries (initdb, pg_ctl) found")
        self.bin = b
        self.root = Path(tempfile.mkdtemp(prefix="gpuperf-pg-"))
        self.data, self.sock = self.root / "data", self.root / "sock"
        self.sock.mkdir()
        pwfile = self.root / "pw"
        pwfile.write_text(PASSWORD + "\n")
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.sock, "postgres")
            shutil.chown(pwfile, "postgres")
        self.port = _free_port()
        self._run(str(b / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth-local=trust",
                  "--auth-host=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8", "--no-sync")
        self._run(*self._start())
        self.url = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{self.port}/postgres"

    def _run(self, *cmd: str) -> None:
        full = ["runuser", "-u", "postgres", "--", *cmd] if self.as_postgres else list(cmd)
        proc = subprocess.run(full, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stdout}{proc.stderr}")

    def database(self, name: str) -> str:
        """Create the database ``name`` (empty) and return its URL."""
        self._run(str(self.bin / "createdb"), "-h", str(self.sock), "-p", str(self.port), "-U", "postgres", name)
        return self.url.rsplit("/", 1)[0] + "/" + name

    def _pg_ctl(self, *args: str) -> list[str]:
        return [str(self.bin / "pg_ctl"), "-D", str(self.data), *args]

    def _start(self) -> list[str]:
        return self._pg_ctl("-w", "-t", "60", "-l", str(self.root / "log"), "-o",
                            f"-p {self.port} -k {self.sock} -c listen_addresses=127.0.0.1 -c fsync=off", "start")

    def pause_command(self) -> list[str]:
        """The command line that stops the server as an administrator would (``pg_ctl stop -m
        fast``), keeping its data, for a child process to run: :meth:`resume` starts it again."""
        cmd = self._pg_ctl("-m", "fast", "-w", "stop")
        return ["runuser", "-u", "postgres", "--", *cmd] if self.as_postgres else cmd

    def resume(self) -> None:
        """Start the server again after :meth:`pause_command` ran (same data, port and socket)."""
        self._run(*self._start())

    def stop(self) -> None:
        try:
            self._run(*self._pg_ctl("-m", "immediate", "-w", "stop"))
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
