"""A Spark standalone cluster on 127.0.0.1 (one master, one worker) from PySpark's own jars.

For tests and trying ``spark.master = "spark://..."`` without installing Spark: PySpark ships the
same jars as a Spark distribution, so ``java -cp <pyspark>/jars/*`` starts the master and worker.

    python -m harness.spark_cluster --dir .run/spark    # prints the master URL, Ctrl-C stops
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from frazil_dev.kafka_broker import free_port

START_TIMEOUT_S = 60.0


class ClusterError(RuntimeError):
    pass


def _pyspark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass
class SparkCluster:
    workdir: Path
    master_port: int
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def work_dir(self) -> Path:
        """Where the worker keeps one folder per application it ran (``app-*``)."""
        return self.workdir / "work"

    @classmethod
    def start(cls, workdir: Path, *, cores: int = 2, memory: str = "2g") -> SparkCluster:
        workdir = Path(workdir).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        cluster = cls(workdir, free_port())
        home = _pyspark_home()
        # The worker builds executor command lines with Spark's launcher, which asks for the Scala
        # version a distribution records in its RELEASE file; PySpark has no such file.
        env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_SCALA_VERSION": "2.13"}
        java = ["java", "-Xmx512m", "-cp", f"{home}/jars/*"]
        try:
            cluster._spawn([*java, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                            str(cluster.master_port), "--webui-port", str(free_port())], "master.log", env)
            cluster._wait_port(cluster.master_port, "master.log")
            cluster._spawn([*java, "org.apache.spark.deploy.worker.Worker", cluster.master_url, "--host", "127.0.0.1",
                            "--cores", str(cores), "--memory", memory, "--webui-port", str(free_port()),
                            "--work-dir", str(cluster.work_dir)], "worker.log", env)
            cluster._wait_log("worker.log", r"Successfully registered with master")
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _spawn(self, cmd: list[str], log_name: str, env: dict[str, str]) -> None:
        with open(self.workdir / log_name, "wb") as out:
            self.procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                               start_new_session=True))

    def _check_alive(self, log_name: str) -> None:
        for proc in self.procs:
            if proc.poll() is not None:
                tail = (self.workdir / log_name).read_text(errors="replace")[-3000:]
                raise ClusterError(f"a Spark cluster process exited during start-up; see {self.workdir}:\n{tail}")

    def _wait_port(self, port: int, log_name: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            self._check_alive(log_name)
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return
            except OSError:
                time.sleep(0.3)
        raise ClusterError(f"the Spark master did not listen within {START_TIMEOUT_S:.0f}s; see {self.workdir}")

    def _wait_log(self, log_name: str, pattern: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            self._check_alive(log_name)
            if re.search(pattern, (self.workdir / log_name).read_text(errors="replace")):
                return
            time.sleep(0.3)
        raise ClusterError(f"the Spark worker did not register within {START_TIMEOUT_S:.0f}s; see {self.workdir}")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.procs.clear()

    def __enter__(self) -> SparkCluster:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.spark_cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(".run/spark"))
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--memory", default="2g")
    args = parser.parse_args(argv)
    try:
        with SparkCluster.start(args.dir, cores=args.cores, memory=args.memory) as cluster:
            print(cluster.master_url, flush=True)
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
