"""A one-node SLURM cluster on 127.0.0.1 for the tests: munged, slurmctld and slurmd as children.

Uses Debian's slurm-wlm packages (`slurmctld slurmd slurm-client munge`); `install_slurm()`
installs them with apt-get when running as root, else the caller skips. Everything the cluster
writes (slurm.conf, munge key and socket, state, spool, logs) lives under one directory and no
system service is started. Client commands find the cluster through `SLURM_CONF` (see
`SlurmCluster.env()`), with one exception: the SLURM executor's job step drops every `SLURM_*`
variable but the allocation's ids before its nested `srun`, which then looks for the config at
/etc/slurm/slurm.conf and then at /run/slurm/conf/slurm.conf (the cache a configless compute
node's slurmd keeps). So the cluster links /run/slurm/conf to its config folder while it runs
(and refuses to start when /etc/slurm/slurm.conf or a foreign /run/slurm/conf exists).

    with SlurmCluster(tmp_dir) as cluster:
        subprocess.run(["sbatch", "--wrap", "hostname"], env={**os.environ, **cluster.env()})

`python -m tests.support.slurm_cluster DIR` starts one by hand and keeps it up until Ctrl-C.

The settings avoid anything a container lacks: no cgroups (proctrack/linuxproc, task/none),
no accounting daemon (accounting_storage/none, jobacct_gather/none), so status comes from
`squeue` and finished jobs stay visible for MinJobAge seconds.
"""
from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

SLURM_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
REQUIRED_COMMANDS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "sinfo", "scontrol")
PARTITION = "rlkeep"
# Long enough that squeue still reports a finished job when the executor polls for it
# (the SLURM executor plugin wants >= 3 x its first status-check delay).
MIN_JOB_AGE_S = 300
# where SLURM clients look for slurm.conf when SLURM_CONF is unset, in this order
SYSTEM_CONFIG = Path("/etc/slurm/slurm.conf")
NODE_CONFIG_CACHE = Path("/run/slurm/conf")


def missing_commands() -> list[str]:
    return [name for name in REQUIRED_COMMANDS if shutil.which(name) is None]


def install_slurm() -> str | None:
    """Install the Debian packages if a command is missing; returns why it could not, or None."""
    if not missing_commands():
        return None
    if os.geteuid() != 0:
        return f"SLURM commands missing ({', '.join(missing_commands())}) and not root: cannot apt-get install"
    if shutil.which("apt-get") is None:
        return f"SLURM commands missing ({', '.join(missing_commands())}) and no apt-get on this system"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update"],
                    ["apt-get", "install", "-y", "--no-install-recommends", *SLURM_PACKAGES]):
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
        if result.returncode != 0:
            return f"{' '.join(command)} failed: {(result.stderr or result.stdout).strip()[-500:]}"
    still = missing_commands()
    return f"still missing after apt-get install: {', '.join(still)}" if still else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def node_resources() -> tuple[int, int]:
    """(CPUs, RealMemory MiB) as slurmd itself detects them, so the node registers as idle."""
    result = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True, timeout=30)
    fields = dict(item.split("=", 1) for item in result.stdout.split() if "=" in item)
    return int(fields["CPUs"]), int(fields["RealMemory"])


def render_slurm_conf(root: Path, *, host: str, cpus: int, memory_mb: int, ctld_port: int, slurmd_port: int) -> str:
    lines = {
        "ClusterName": "rlkeep",
        "SlurmctldHost": f"{host}(127.0.0.1)",
        "SlurmctldPort": ctld_port,
        "SlurmdPort": slurmd_port,
        "SlurmUser": "root",
        "SlurmdUser": "root",
        "AuthType": "auth/munge",
        "CredType": "cred/munge",
        "AuthInfo": f"socket={root / 'munge' / 'munge.socket'}",
        "StateSaveLocation": root / "state",
        "SlurmdSpoolDir": root / "spool",
        "SlurmctldPidFile": root / "run" / "slurmctld.pid",
        "SlurmdPidFile": root / "run" / "slurmd.pid",
        "SlurmctldLogFile": root / "log" / "slurmctld.log",
        "SlurmdLogFile": root / "log" / "slurmd.log",
        "ProctrackType": "proctrack/linuxproc",
        "TaskPlugin": "task/none",
        "JobAcctGatherType": "jobacct_gather/none",
        "AccountingStorageType": "accounting_storage/none",
        "JobCompType": "jobcomp/none",
        "JobContainerType": "job_container/none",
        "MpiDefault": "none",
        "SwitchType": "switch/none",
        "SchedulerType": "sched/backfill",
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_CPU",
        "ReturnToService": 2,
        "MinJobAge": MIN_JOB_AGE_S,
        "SlurmctldTimeout": 30,
        "SlurmdTimeout": 30,
        "InactiveLimit": 0,
        "KillWait": 5,
        "SlurmctldDebug": "info",
        "SlurmdDebug": "info",
    }
    text = "".join(f"{key}={value}\n" for key, value in lines.items())
    text += f"NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN\n"
    text += f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n"
    return text


def cluster_alive(conf_dir: Path) -> bool:
    """Whether the test cluster whose config folder this is still has its slurmctld running."""
    pid_file = conf_dir.parent / "run" / "slurmctld.pid"
    try:
        os.kill(int(pid_file.read_text().strip()), 0)
    except (OSError, ValueError):
        return False
    return True


class SlurmCluster:
    """munged + slurmctld + slurmd, started as this process's children, stopped by their ids."""

    def __init__(self, root: Path, *, host: str | None = None) -> None:
        self.root = Path(root)
        self.host = host or socket.gethostname().split(".")[0]
        self.conf = self.root / "etc" / "slurm.conf"
        self.partition = PARTITION
        self._processes: dict[str, subprocess.Popen[bytes]] = {}

    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def start(self, timeout: float = 60) -> "SlurmCluster":
        self._check_client_config_paths()
        for sub in ("etc", "munge", "state", "spool", "run", "log"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        munge_dir = self.root / "munge"
        munge_dir.chmod(0o700)
        key = munge_dir / "munge.key"
        if not key.exists():
            key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        cpus, memory_mb = node_resources()
        self.conf.write_text(render_slurm_conf(self.root, host=self.host, cpus=cpus, memory_mb=memory_mb,
                                               ctld_port=free_port(), slurmd_port=free_port()))
        self._link_client_config()
        self._spawn("munged", ["munged", "--foreground", "--force", f"--socket={munge_dir / 'munge.socket'}",
                               f"--key-file={key}", f"--pid-file={munge_dir / 'munged.pid'}",
                               f"--log-file={self.root / 'log' / 'munged.log'}", f"--seed-file={munge_dir / 'seed'}"])
        self._wait(lambda: (munge_dir / "munge.socket").exists(), timeout, "munged socket")
        self._spawn("slurmctld", ["slurmctld", "-D", "-c", "-f", str(self.conf)])
        self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf), "-N", self.host])
        self._wait(self._node_idle, timeout, f"node {self.host} idle in partition {self.partition}")
        return self

    def stop(self) -> None:
        for name in ("slurmd", "slurmctld", "munged"):
            process = self._processes.pop(name, None)
            if process is None or process.poll() is not None:
                continue
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if NODE_CONFIG_CACHE.is_symlink() and Path(os.readlink(NODE_CONFIG_CACHE)) == self.conf.parent:
            NODE_CONFIG_CACHE.unlink()

    def __enter__(self) -> "SlurmCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def logs(self) -> str:
        """The daemons' logs (last lines each), for a failing test's message."""
        parts = []
        for path in sorted((self.root / "log").glob("*.log")):
            parts.append(f"== {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-40:]))
        return "\n".join(parts)

    def _check_client_config_paths(self) -> None:
        if SYSTEM_CONFIG.exists():
            raise RuntimeError(f"{SYSTEM_CONFIG} exists: the executor's nested srun would read it instead of the "
                               "test cluster's config; run this test on a machine that is not a SLURM node")
        if NODE_CONFIG_CACHE.is_symlink() and not cluster_alive(Path(os.readlink(NODE_CONFIG_CACHE))):
            NODE_CONFIG_CACHE.unlink()  # left by a test cluster that was killed
        if NODE_CONFIG_CACHE.exists() or NODE_CONFIG_CACHE.is_symlink():
            raise RuntimeError(f"{NODE_CONFIG_CACHE} exists (a running slurmd's config cache or another test "
                               "cluster); stop it first")

    def _link_client_config(self) -> None:
        NODE_CONFIG_CACHE.parent.mkdir(parents=True, exist_ok=True)
        NODE_CONFIG_CACHE.symlink_to(self.conf.parent, target_is_directory=True)

    def _spawn(self, name: str, argv: list[str]) -> None:
        out = open(self.root / "log" / f"{name}.stdout", "ab")
        self._processes[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **self.env()})
        out.close()

    def _node_idle(self) -> bool:
        for name, process in self._processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with status {process.returncode}\n{self.logs()}")
        result = subprocess.run(["sinfo", "-h", "-p", self.partition, "-o", "%T"], capture_output=True, text=True,
                                env={**os.environ, **self.env()}, timeout=30)
        return result.returncode == 0 and result.stdout.strip() == "idle"

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"SLURM test cluster: no {what} after {timeout:.0f}s\n{self.logs()}")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.support.slurm_cluster DIR", file=sys.stderr)
        return 2
    reason = install_slurm()
    if reason:
        print(reason, file=sys.stderr)
        return 1
    with SlurmCluster(Path(argv[0]).resolve()) as cluster:
        print(f"export SLURM_CONF={cluster.conf}  # partition {cluster.partition}; Ctrl-C stops the cluster", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
