"""A real PostgreSQL server for tests: the catalog that several hosts share (pyiceberg's SQL
catalog through psycopg, Spark's Iceberg ``JdbcCatalog`` through the PostgreSQL JDBC driver).

It runs Debian's ``postgresql`` package binaries (``/usr/lib/postgresql/<version>/bin``) on a
fresh data directory, listening on 127.0.0.1 only, with password authentication for one user.
PostgreSQL refuses to run as root: started by root, the server runs as the ``postgres`` user on a
data directory outside root's private temporary folders.

    with PostgresServer.start() as pg:
        print(pg.uri())   # postgresql+psycopg://frazil:...@127.0.0.1:PORT/frazil

It runs with ``wal_level = logical``, so that Debezium's PostgreSQL connector can read it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from frazil_dev.kafka_broker import free_port

if TYPE_CHECKING:
    import psycopg

USER = "frazil"
PASSWORD = "frazil-test-pg"
DATABASE = "frazil"
START_TIMEOUT_S = 60.0


class PostgresError(RuntimeError):
    """The local PostgreSQL server could not be found, initialised or started."""


def binaries() -> Path:
    """The newest installed PostgreSQL server's bin directory."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name)
                   if p.parent.parent.name.isdigit() else 0)
    if not found:
        raise PostgresError("no PostgreSQL server found under /usr/lib/postgresql; install Debian's postgresql package "
                            "(apt-get install postgresql)")
    return found[-1].parent


def _spawn(datadir: Path, port: int, user: dict[str, int]) -> subprocess.Popen[bytes]:
    """The server on ``datadir/data`` (made by initdb), its log appended to ``datadir/server.log``."""
    log = open(datadir / "server.log", "ab")   # the child keeps its own handle
    if user:
        os.chown(datadir / "server.log", user["user"], user["group"])
    # max_connections: a chaos run's processes, the rebalance storm's, Spark's and the runner's pools at once
    argv = [str(binaries() / "postgres"), "-D", str(datadir / "data"), "-p", str(port), "-k", str(datadir),
            "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200",
            "-c", "shared_buffers=32MB",
            # Debezium's connector reads the write-ahead log through a slot
            "-c", "wal_level=logical", "-c", "max_replication_slots=8", "-c", "max_wal_senders=8"]
    proc: subprocess.Popen[bytes] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=datadir,
                                                     start_new_session=True, **user)  # type: ignore[call-overload]
    log.close()
    return proc


@dataclass
class PostgresServer:
    """A running server; ``stop`` is idempotent. ``wal_level = logical``, for change data capture."""

    datadir: Path
    port: int
    _proc: subprocess.Popen[bytes]
    _user: dict[str, int]   # the user and group the server runs as, when started by root

    def uri(self, driver: str = "postgresql+psycopg") -> str:
        """The SQLAlchemy URI of the test database (pyiceberg's SQL catalog ``uri``)."""
        return f"{driver}://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{DATABASE}"

    def connect(self) -> psycopg.Connection[tuple[object, ...]]:
        """A psycopg connection to the test database, in autocommit mode."""
        import psycopg

        return psycopg.connect(host="127.0.0.1", port=self.port, user=USER, password=PASSWORD, dbname=DATABASE,
                               autocommit=True)

    @classmethod
    def start(cls) -> PostgresServer:
        bin_dir = binaries()
        as_root = os.geteuid() == 0
        owner = pwd.getpwnam("postgres") if as_root else None
        datadir = Path(tempfile.mkdtemp(prefix="frazil-pg-"))
        pwfile = datadir / "pw"
        pwfile.write_text(PASSWORD)
        if owner is not None:
            os.chown(datadir, owner.pw_uid, owner.pw_gid)
            os.chown(pwfile, owner.pw_uid, owner.pw_gid)
        user = {"user": owner.pw_uid, "group": owner.pw_gid} if owner is not None else {}
        data = datadir / "data"
        init = subprocess.run([str(bin_dir / "initdb"), "-D", str(data), "-U", USER, "--auth=scram-sha-256",
                               f"--pwfile={pwfile}", "-E", "UTF8", "--no-sync"],
                              capture_output=True, text=True, cwd=datadir, **user)  # type: ignore[call-overload]
        if init.returncode != 0:
            shutil.rmtree(datadir, ignore_errors=True)
            raise PostgresError(f"initdb failed: {init.stdout}{init.stderr}")
        port = free_port()
        server = cls(datadir, port, _spawn(datadir, port, user), user)
        try:
            server._wait_ready()
            server._create(DATABASE)
        except BaseException:
            server.stop()
            raise
        return server

    def restart(self, down_s: float, *, kill: bool = False) -> None:
        """Stop the server (SIGKILL: a crash, recovered from the write-ahead log at the next start;
        else a fast shutdown that cuts its clients off), stay down ``down_s`` seconds, start it again
        on the same port and data. Clients see refused connections meanwhile."""
        self._halt(kill=kill)
        time.sleep(down_s)
        self._proc = _spawn(self.datadir, self.port, self._user)
        self._wait_ready()

    def create_database(self, name: str) -> str:
        """A new empty database on this server (e.g. one per run, for a catalog of its own); its
        SQLAlchemy URI."""
        self._create(name)
        return self.uri().rsplit("/", 1)[0] + f"/{name}"

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise PostgresError(f"PostgreSQL exited during start-up:\n{self.log_tail()}")
            ready = subprocess.run([str(binaries() / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)],
                                   check=False)
            if ready.returncode == 0:   # listening and accepting connections: crash recovery done
                return
            time.sleep(0.2)
        raise PostgresError(f"PostgreSQL did not accept connections within {START_TIMEOUT_S:.0f}s:\n{self.log_tail()}")

    def _create(self, name: str) -> None:
        env = {**os.environ, "PGPASSWORD": PASSWORD}
        created = subprocess.run([str(binaries() / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", USER,
                                  "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c", f"CREATE DATABASE {name}"],
                                 capture_output=True, text=True, env=env, cwd=self.datadir,
                                 **self._user)  # type: ignore[call-overload]
        if created.returncode != 0:
            raise PostgresError(f"creating database {name} failed: {created.stdout}{created.stderr}")

    def log_tail(self, chars: int = 3000) -> str:
        path = self.datadir / "server.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def _halt(self, *, kill: bool = False) -> None:
        """SIGKILL to the postmaster and its backends at once (its own process group), as in a crash;
        else a "fast" shutdown, which lets go of the clients still connected."""
        if self._proc.poll() is not None:
            return
        if kill:
            os.killpg(self._proc.pid, signal.SIGKILL)
        else:
            self._proc.send_signal(signal.SIGINT)
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def stop(self) -> None:
        self._halt()
        shutil.rmtree(self.datadir, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
