"""A SLURM client configuration for the processes of a machine that has SLURM's client but no cluster.

Snakemake's SLURM executor plugin (the `slurm` extra) runs `scontrol show config` when it is
imported, which every Snakemake start does while it collects its executor plugins. On a machine
where SLURM's client is installed and no controller answers (this project's CI and development
machines: .ci/run installs SLURM for tests/test_slurm.py), scontrol retries for about 9 s, so every
`snakemake` of the tests and the demo paid 9 s before planning. With this configuration the
controller's port is refused at once on the loopback address. A machine with a real cluster
(SLURM_CONF set) or without SLURM's client is left as it is; tests/test_slurm.py gives its
commands the configuration of its own cluster.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

NO_CLUSTER = "ClusterName=none\nSlurmctldHost=localhost\nSlurmctldPort=1\nMessageTimeout=1\n"


def no_cluster_env(folder: Path) -> dict[str, str]:
    """{"SLURM_CONF": a configuration naming no reachable controller}, or {} where it is not needed."""
    if os.environ.get("SLURM_CONF") or shutil.which("scontrol") is None:
        return {}
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "no-cluster-slurm.conf"
    conf.write_text(NO_CLUSTER)
    return {"SLURM_CONF": str(conf)}
