"""A private PostgreSQL cluster on 127.0.0.1 for the registry tests, from Debian's binaries.

`postgres_server` (session) runs initdb + pg_ctl from /usr/lib/postgresql/<version>/bin (or
PATH) as the `postgres` user when the tests run as root (PostgreSQL refuses to run as root),
with the data directory and the unix socket in a private temp directory, TCP on 127.0.0.1 at
a free port, trust authentication and fsync off. It is stopped and removed after the session.
Each test asks it for a fresh database. The fixture skips only when initdb is not installed
(`apt-get install postgresql`); any other failure to start is an error.
"""
from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

_database_numbers = itertools.count()


def find_pg_bin() -> Path | None:
    """The bin folder of the newest installed PostgreSQL server, or None."""
    found = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    if found:
        newest = max(found, key=lambda path: int(Path(path).parts[-3]) if Path(path).parts[-3].isdigit() else 0)
        return Path(newest).parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PostgresServer:
    bin_dir: Path
    base: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="rlkeep-pg-")))
    port: int = field(default_factory=free_port)
    user: str = "postgres"

    @property
    def data_dir(self) -> Path:
        return self.base / "data"

    def _as_server_user(self, *argv: str) -> subprocess.CompletedProcess[str]:
        command = [*argv]
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("tests run as root but there is no `postgres` user to run PostgreSQL as; "
                                   "install the Debian `postgresql` package") from None
            command = ["runuser", "-u", "postgres", "--", *argv]
        result = subprocess.run(command, cwd=self.base, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            log = self.base / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr[-2000:]}\n{tail}")
        return result

    def start(self) -> "PostgresServer":
        (self.base / "sock").mkdir()
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            for path in (self.base, self.base / "sock"):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self.base.chmod(0o700)
        self._as_server_user(str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "-U", self.user,
                             "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
        options = (f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.base / 'sock'}"
                   " -c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        self._as_server_user(str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.base / "server.log"),
                             "-o", options, "-w", "-t", "60", "start")
        return self

    def stop(self) -> None:
        try:
            if (self.data_dir / "postmaster.pid").exists():
                self._as_server_user(str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def url(self, database: str = "postgres", *, password: str | None = None) -> str:
        auth = f"{self.user}:{password}" if password else self.user
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        import psycopg

        name = f"registry_{os.getpid()}_{next(_database_numbers)}"
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return name


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    bin_dir = find_pg_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not installed: apt-get install -y postgresql")
    server = PostgresServer(bin_dir)
    try:
        server.start()
    except BaseException:
        server.stop()
        raise
    yield server
    server.stop()
