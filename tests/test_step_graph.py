"""The step graph rlkeep.pipeline states (`after`, read by `parents`) is the graph the Snakefile's
inputs make: for every run kind and every shape of `publish`, the edges of `snakemake --rulegraph
<job>/DONE` equal the ones `parents` gives. A rule input added or removed without its `after`
entry fails here, so STATUS.json's causes (rlkeep.stepstate) cannot drift from the rules.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlkeep.pipeline import parents
from tests.conftest import REPO, write_record

RL = {"checkpoint": {"interval": 20, "rule": {"kind": "latest"}}}
SHAPES = {  # job -> record fields beyond the common ones
    "rl-full": {**RL, "base_model": "o/base", "publish": {"model": "o/m", "traces": "o/t"}},
    "rl-local": RL,
    "sft-run": {"kind": "sft"},
    "datagen-run": {"kind": "datagen", "publish": {"traces": "o/t"}},
    "datagen-local": {"kind": "datagen"},
    "eval-run": {"kind": "eval"},
}


def rulegraph_edges(data_root: Path, job: str) -> set[tuple[str, str]]:
    """(parent, child) rule pairs of the real Snakefile's rule graph for <job>/DONE."""
    result = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
                             "--rulegraph", "dot", f"{job}/DONE"], cwd=data_root, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    labels = dict(re.findall(r"^\s*(\d+)\[label = \"(\w+)\"", result.stdout, re.M))
    edges = {(labels[a], labels[b]) for a, b in re.findall(r"^\s*(\d+) -> (\d+)", result.stdout, re.M)}
    assert labels and edges, result.stdout
    return edges


def table_edges(kind: str, publish: dict | None) -> set[tuple[str, str]]:
    """The same pairs from rlkeep.pipeline.parents, walking back from done."""
    edges, todo, seen = set(), ["done"], set()
    while todo:
        rule = todo.pop()
        if rule in seen:
            continue
        seen.add(rule)
        for parent in parents(rule, kind, publish):
            edges.add((parent, rule))
            todo.append(parent)
    return edges


@pytest.mark.parametrize("job", sorted(SHAPES))
def test_the_table_graph_is_the_snakefile_graph(data_root: Path, job: str) -> None:
    record = {"job": job, "user": "demo", "scheduler": "none", "chain": [f"/demo/{job}"],
              "store": f"file:///nonexistent/{job}", **SHAPES[job]}
    write_record(data_root, record)
    snakefile = rulegraph_edges(data_root, job)
    table = table_edges(record.get("kind", "rl"), record.get("publish"))
    assert table == snakefile, {"only in the table": sorted(table - snakefile),
                                "only in the Snakefile": sorted(snakefile - table)}
