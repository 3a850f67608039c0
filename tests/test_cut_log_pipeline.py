"""Any prefix of a log is a log (issue 27, done-when 1): an attempt killed while printing its metrics
leaves a line cut mid-JSON and a tail of NUL bytes; the chain still reaches DONE with the selection
of the uncut chain, through the real Snakemake pipeline, S3 server and Iris stand-in. The same run
carries vLLM's own log as vLLM writes it (tests/data/upstream/) and its stats reach vllm.csv."""
from __future__ import annotations

import csv
import json
import re
import tarfile
from pathlib import Path

from rlkeep.checkpoints import select_checkpoint
from rlkeep.metrics import build_surface
from rlkeep.storage import open_store
from tests.conftest import run_snakemake, seed_example

JOB = "rl-demo"
NUL_TAIL = "\0" * 512
VLLM_LOG = Path(__file__).parent / "data" / "upstream" / "vllm_v1.vllm.log"  # what a preempted node leaves at the end of a file on a network filesystem


def cut_next_metrics_line(text: str) -> str:
    """The attempt's last WANDB_MIRROR line as the next step would print it, cut mid-JSON."""
    last = [line for line in text.splitlines() if "WANDB_MIRROR kind=train" in line][-1]
    step = int(re.search(r"step=(\d+)", last)[1])
    following = last.replace(f"step={step} ", f"step={step + 1} ", 1)
    return following[:following.index("metrics={") + 120]


def test_a_chain_whose_first_log_ends_in_a_cut_line_reaches_done_with_the_uncut_selection(
        data_root: Path, bucket: str, iris) -> None:
    run, record = seed_example(data_root, bucket, iris)
    first = run.chain[0]
    slug = first.rsplit("/", 1)[1]
    store = open_store(record["store"])
    uncut = {s: store.read_bytes(f"logs/{s}.out").decode() for s in run.steps_logged}
    cut = cut_next_metrics_line(uncut[slug])
    # The same cut in both places rlkeep reads the log from: Iris's `job logs` and the store's copy.
    store.put_bytes(f"logs/{slug}.out", (uncut[slug] + cut + NUL_TAIL).encode())
    store.put_bytes(f"vllm/{slug}.log", VLLM_LOG.read_bytes())  # the stats only in vLLM's own log
    state = iris.state()
    state["jobs"][first]["log_lines"].append(f"[23:59:59] task={first}/0 | {cut}{NUL_TAIL}")
    iris.write_state(state)

    result = run_snakemake(data_root, f"{JOB}/DONE")
    assert result.returncode == 0, result.stderr[-4000:]
    job = data_root / JOB

    with tarfile.open(job / "sync/logs.tar") as tar:
        preserved = tar.extractfile(f"attempts/{slug}/trainer.log").read()
    assert preserved.endswith(NUL_TAIL.encode())  # the evidence is kept as the node left it
    cut_line = preserved.decode().splitlines().index(next(l for l in preserved.decode().splitlines() if cut in l)) + 1

    training = build_surface([(s, f"{s}.out", text) for s, text in uncut.items()])
    candidates = json.loads((job / "checkpoint/candidates.json").read_text())["candidates"]
    expected = select_checkpoint(candidates, record["checkpoint"]["rule"], training.rows, None)["step"]
    done = json.loads((job / "DONE").read_text())
    assert done["checkpoint"]["step"] == expected
    assert json.loads((job / "checkpoint/selected.json").read_text())["step"] == expected
    assert all(status in {"completed", "not_applicable"} for status in done["steps"].values())

    skipped = done["skipped_log_lines"]
    assert skipped["count"] == 1 and skipped["by_attempt"] == {slug: {"wandb-json": 1}}
    [named] = skipped["named"]
    assert (named["attempt"], named["line"], named["kind"]) == (slug, cut_line, "wandb-json")
    assert named["reason"].startswith("WANDB_MIRROR metrics are not valid JSON")
    report = (job / "REPORT.md").read_text()
    assert "## Skipped log lines" in report
    assert f"| logs.tar:attempts/{slug}/trainer.log:{cut_line} | wandb-json | WANDB_MIRROR metrics are not valid JSON" in report
    attempts = json.loads((job / "metrics/attempts.json").read_text())
    assert attempts["skipped_lines"] == skipped and attempts["attempts_without_metrics"] == []

    with (job / "metrics/vllm.csv").open(newline="") as handle:
        from_vllm_log = [row for row in csv.DictReader(handle) if row["source"] == f"store/vllm/{slug}.log"]
    assert [(row["attempt"], row["time"], row["engines"], row["prompt_tokens_per_s"]) for row in from_vllm_log] == [
        (slug, "03-30 17:05:40", "2", "2000"), (slug, "03-30 17:05:50", "1", "950.4")]
    generation = (job / "metrics/generation.md").read_text()
    assert f"| {slug} | store/vllm/{slug}.log | vLLM log |" in generation and "## Log files not read" in generation
