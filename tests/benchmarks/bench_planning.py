"""Planning speed: `-n` over many records and a no-op rerun of many completed jobs.

Target (issue 19, campaign scale): on a 2-core machine, `snakemake --profile local -n` over
1,000 fresh records and a no-op rerun over 1,000 completed jobs each finish in under 15 s (issue
10 asked 10 s for 100). The campaign target takes at most `max_new_jobs` (100) records that have
not started per invocation (rlkeep.settled.admitted_jobs), so `dryrun_fresh_N` plans 100 of them;
`dryrun_fresh_all_N` is the same `-n` with `--config max_new_jobs=all`: every rule of every job
planned (18 rule jobs per `rl` record), Snakemake's own per-job cost.
Baseline, in the same run: the same two invocations for 1 job, so the figures show what the
other jobs cost (per-job planning cost = (tN - t1) / (N - 1)).

The no-op is measured twice: `noop` is the campaign target (`snakemake` with no target), which
leaves settled jobs out of planning (rlkeep.settled); `noop_named` names every `<job>/DONE`, so
Snakemake judges every rule job of every record as before. `dryrun_settled_N_plus_10_new` is a
campaign's ordinary day: `-n` over the N completed jobs and ten new records.

How 100 completed jobs are made cheaply (`clone_completed_job`):
1. one job is completed for real: the whole pipeline runs once against a local SeaweedFS and
   the Iris stand-in (full mode), or, in --quick mode, its outputs are written as placeholders
   and `snakemake --touch` stamps them in DAG order and records their metadata;
2. for each new name, `records/<new>.yaml` is the seed record with the job name replaced;
   `<new>/` is a hard-linked copy of `<seed>/` (file paths renamed, directory mtimes kept);
   every `.snakemake/metadata/<base64 path>` entry of the seed is rewritten under the new
   path, with the job name replaced in its paths and params and the `done` rule's
   `record_sha256` param recomputed from the new record (the one param that is not the job
   name substituted); the clone's DONE names the clone's record's sha256. The measured no-op
   run must then say "Nothing to be done" (checked).

Times are wall seconds of the whole `python -m snakemake` process (start-up included), and
its CPU seconds (user + sys from os.wait4), since other work on the machine skews wall time.
Peak memory is that process's ru_maxrss (os.wait4 in a small runner process, see RUNNER).
`import_*_s` split the fixed start-up cost: Snakemake imports every installed executor plugin,
and the SLURM one imports pandas.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SEED = "plan-seed"
TARGET_S = 15.0
NEW_IN_CAMPAIGN = 10  # fresh records beside the completed ones in the mixed -n


def snakemake_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
            "--profile", str(REPO / "profiles" / "local"), *args]


# Runs one command and reports its wall time and its rusage. It sits between this (large)
# process and snakemake because Linux counts the parent's resident set into a forked child's
# ru_maxrss; a child of this small runner is measured cleanly.
RUNNER = r"""
import json, os, subprocess, sys, time
started = time.monotonic()
child = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(child.pid, 0)
with open(sys.argv[1], "w") as out:
    json.dump({"wall_s": time.monotonic() - started, "cpu_s": usage.ru_utime + usage.ru_stime,
               "maxrss_mb": usage.ru_maxrss / 1024}, out)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def timed_snakemake(data_root: Path, *args: str, env: dict[str, str] | None = None) -> dict:
    """Run snakemake once: wall and CPU seconds and peak RSS of that process, and its output."""
    with tempfile.TemporaryDirectory(prefix="rlkeep-bench-run-") as scratch:
        usage_path = Path(scratch) / "usage.json"
        result = subprocess.run([sys.executable, "-c", RUNNER, str(usage_path), *snakemake_command(*args)],
                                cwd=data_root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, **(env or {})})
        if result.returncode != 0:
            raise RuntimeError(f"snakemake {' '.join(args)} in {data_root} exited {result.returncode}:\n"
                               f"{result.stdout[-3000:]}")
        usage = json.loads(usage_path.read_text())
    return {**{key: round(value, 2) for key, value in usage.items()}, "output": result.stdout}


##### making completed jobs #####


def b64_path(path: str) -> str:
    """Snakemake's metadata file name for an output path (persistence/file.py: urlsafe base64;
    names over the filesystem's limit become '@'-prefixed chunk folders, which job paths never need)."""
    name = base64.urlsafe_b64encode(path.encode()).decode()
    if len(name) >= 255:
        raise ValueError(f"{path}: metadata name too long for this helper")
    return name


def decode_b64_path(name: str) -> str:
    return base64.urlsafe_b64decode(name).decode()


def rename_in_text(text: str, old: str, new: str) -> str:
    """Replace the job name where it is a whole name (not part of a longer one)."""
    return re.sub(rf"(?<![A-Za-z0-9._-]){re.escape(old)}(?![A-Za-z0-9])", new, text)


def clone_completed_job(data_root: Path, seed: str, new: str) -> None:
    records = data_root / "records"
    record_text = rename_in_text((records / f"{seed}.yaml").read_text(), seed, new)
    (records / f"{new}.yaml").write_text(record_text)
    record_digest = hashlib.sha256(record_text.encode()).hexdigest()

    source, dest = data_root / seed, data_root / new
    directories = []
    for dirpath, dirnames, filenames in os.walk(source):
        relative = Path(dirpath).relative_to(source)
        target_dir = dest / Path(*[rename_in_text(part, seed, new) for part in relative.parts])
        target_dir.mkdir(parents=True, exist_ok=True)
        directories.append((Path(dirpath), target_dir))
        for name in filenames:
            os.link(Path(dirpath) / name, target_dir / rename_in_text(name, seed, new))
    # DONE names the record it describes (rlkeep.settled): the clone's names the clone's record
    done_path = dest / "DONE"
    done = json.loads((source / "DONE").read_text())
    done_path.unlink()
    done_path.write_text(json.dumps({**done, "record_sha256": record_digest}))
    shutil.copystat(source / "DONE", done_path)
    for src_dir, dst_dir in reversed(directories):  # children first: setting a mtime is final
        shutil.copystat(src_dir, dst_dir)

    metadata = data_root / ".snakemake" / "metadata"
    for entry in list(metadata.iterdir()):
        if entry.name.startswith("@"):
            continue  # a chunk folder of a very long path: never one of the job's outputs
        path = decode_b64_path(entry.name)
        if not path.startswith(f"{seed}/"):
            continue
        data = json.loads(rename_in_text(entry.read_text(), seed, new))
        if data.get("rule") == "done":
            data["params"] = [re.sub(r"'record_sha256': '[0-9a-f]{64}'", f"'record_sha256': '{record_digest}'", param)
                              for param in data["params"]]
        target = metadata / b64_path(rename_in_text(path, seed, new))
        target.write_text(json.dumps(data))
        shutil.copystat(entry, target)


def directory_outputs() -> list[str]:
    """Output patterns declared as directory("...") in rules/*.smk, e.g. '{job}/model'."""
    found = []
    for smk in sorted((REPO / "rules").glob("*.smk")):
        found += re.findall(r'=\s*directory\(\s*"([^"]+)"\s*\)', smk.read_text())
    return found


def complete_by_touch(data_root: Path, job: str, outputs: list[str]) -> None:
    """Placeholders for every output, then `--touch` stamps them in DAG order with metadata."""
    dirs = {pattern.replace("{job}", job) for pattern in directory_outputs()}
    for output in outputs:
        path = data_root / output
        if output in dirs:
            path.mkdir(parents=True, exist_ok=True)
            (path / ".snakemake_timestamp").touch()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.suffix == ".tar":  # read after every run (STATUS.json, campaign): an empty archive
                with tarfile.open(path, "w"):
                    pass
            elif output == f"{job}/DONE":  # what the done step writes about the record
                record = (data_root / "records" / f"{job}.yaml").read_bytes()
                path.write_text(json.dumps({"job": job, "kind": "rl",
                                            "record_sha256": hashlib.sha256(record).hexdigest()}))
            else:
                path.write_text(json.dumps({"status": "completed", "placeholder": True}) if path.suffix == ".json" else "x")
    timed_snakemake(data_root, f"{job}/DONE", "--touch")


def complete_for_real(data_root: Path, job: str) -> dict[str, str]:
    """The real pipeline once: a generated run in SeaweedFS, the Iris stand-in, no Hub."""
    from rlkeep_dev.devserver.iris import install_executable
    from rlkeep_dev.devserver.s3 import S3Server
    from rlkeep_dev.example import iris_state, write_example_run
    from rlkeep.jsonio import write_json
    from rlkeep.storage import open_store, upload_tree

    import yaml

    services = data_root.parent / "services"
    server = S3Server(services / "s3")
    server.start()
    try:
        server.create_bucket("runs")
        os.environ.update(server.env())
        run = write_example_run(services / "run", job=job, user="bench", n_trials=24, large_result_mb=0.5,
                                large_pane_mb=0.3)
        store_url = f"s3://runs/iris/{job}"
        upload_tree(run.root, open_store(store_url))
        record = run.record(store_url=store_url, scheduler="iris", cluster="cw-bench")
        (data_root / "records" / f"{job}.yaml").write_text(yaml.safe_dump(record, sort_keys=False))
        write_json(services / "iris-state.json", iris_state(run))
        bin_dir = install_executable(services / "bin").parent
        env = {**server.env(), "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
               "IRIS_STANDIN_STATE": str(services / "iris-state.json"),
               "IRIS_STANDIN_CALLS": str(services / "iris-calls.jsonl")}
        timed_snakemake(data_root, f"{job}/DONE", env=env)
    finally:
        server.stop()
    return env


##### measuring #####


def measure(work: Path, n_jobs: int, quick: bool) -> dict:
    seed_root = work / "seed"
    (seed_root / "records").mkdir(parents=True)
    figures: dict = {"jobs": n_jobs, "seed": "snakemake --touch" if quick else "real pipeline"}
    started = time.monotonic()
    if quick:
        write_seed_record(seed_root)
    else:
        complete_for_real(seed_root, SEED)
    figures["seed_s"] = round(time.monotonic() - started, 1)
    seed_record = (seed_root / "records" / f"{SEED}.yaml").read_text()

    # -n over records none of which has run: the whole plan, every rule of every job
    plans = {}
    for count in (1, n_jobs):
        fresh = work / f"fresh-{count}"
        (fresh / "records").mkdir(parents=True)
        for index in range(count):
            job = f"plan-{index:03d}"
            (fresh / "records" / f"{job}.yaml").write_text(rename_in_text(seed_record, SEED, job))
        plans[count] = dry = timed_snakemake(fresh, "-n")
        figures[f"dryrun_fresh_{count}_s"] = dry["wall_s"]
        figures[f"dryrun_fresh_{count}_cpu_s"] = dry["cpu_s"]
        figures[f"dryrun_fresh_{count}_planned_jobs"] = planned_job_count(dry["output"])
        figures[f"dryrun_fresh_{count}_peak_rss_mb"] = dry["maxrss_mb"]
        if count > 1:  # the whole campaign at once: every record planned (no max_new_jobs limit)
            full = timed_snakemake(fresh, "-n", "--config", "max_new_jobs=all")
            figures[f"dryrun_fresh_all_{count}_s"] = full["wall_s"]
            figures[f"dryrun_fresh_all_{count}_cpu_s"] = full["cpu_s"]
            figures[f"dryrun_fresh_all_{count}_planned_jobs"] = planned_job_count(full["output"])
            figures[f"dryrun_fresh_all_{count}_peak_rss_mb"] = full["maxrss_mb"]

    if quick:
        started = time.monotonic()
        outputs = [rename_in_text(output, "plan-000", SEED) for output in dry_run_outputs(plans[1]["output"])]
        complete_by_touch(seed_root, SEED, outputs)
        figures["seed_s"] = round(time.monotonic() - started, 1)

    # a no-op rerun over completed jobs: the seed plus count - 1 clones of it
    for count in (1, n_jobs):
        done = work / f"done-{count}"
        shutil.copytree(seed_root, done, symlinks=True, copy_function=os.link)
        restore_dir_mtimes(seed_root, done)
        for index in range(1, count):
            clone_completed_job(done, SEED, f"plan-{index:03d}")
        if count > 1:  # the campaign pages list every record: make them once for the clones (untimed)
            invocation = shlex.join(["snakemake", *snakemake_command()[3:7]])  # as invocation_from_argv reads it
            subprocess.run([sys.executable, "-m", "rlkeep", "campaign", "--data-root", str(done),
                            "--invocation", invocation], check=True, capture_output=True)
        # the campaign target (settled jobs left out, rlkeep.settled), then every DONE named, which
        # has Snakemake judge every job of every record
        jobs = [SEED] + [f"plan-{index:03d}" for index in range(1, count)]
        for name, targets in (("noop", ()), ("noop_named", tuple(f"{job}/DONE" for job in jobs))):
            noop = timed_snakemake(done, *targets)
            if "Nothing to be done" not in noop["output"]:
                raise RuntimeError(f"the no-op rerun ({name}) over {count} completed jobs did work:\n"
                                   f"{noop['output'][-3000:]}")
            figures[f"{name}_{count}_s"] = noop["wall_s"]
            figures[f"{name}_{count}_cpu_s"] = noop["cpu_s"]
            figures[f"{name}_{count}_peak_rss_mb"] = noop["maxrss_mb"]

    # a campaign's day: -n over the completed jobs plus ten new records (the settled ones are left out)
    campaign = work / f"done-{n_jobs}"
    for index in range(NEW_IN_CAMPAIGN):
        job = f"new-{index:03d}"
        (campaign / "records" / f"{job}.yaml").write_text(rename_in_text(seed_record, SEED, job))
    dry = timed_snakemake(campaign, "-n")
    figures[f"dryrun_settled_{n_jobs}_plus_{NEW_IN_CAMPAIGN}_new_s"] = dry["wall_s"]
    figures[f"dryrun_settled_{n_jobs}_plus_{NEW_IN_CAMPAIGN}_new_cpu_s"] = dry["cpu_s"]
    figures[f"dryrun_settled_{n_jobs}_plus_{NEW_IN_CAMPAIGN}_new_planned_jobs"] = planned_job_count(dry["output"])

    n = n_jobs
    for name, one in (("dryrun_fresh_all", "dryrun_fresh"), ("noop", "noop"), ("noop_named", "noop_named")):
        figures[f"{name}_per_extra_job_cpu_ms"] = round(
            1000 * (figures[f"{name}_{n}_cpu_s"] - figures[f"{one}_1_cpu_s"]) / (n - 1), 1)
    figures.update(import_costs())
    return figures


def import_costs() -> dict:
    """Start-up share of every invocation: importing snakemake's CLI, and within it the SLURM
    executor plugin (Snakemake imports every installed executor plugin; this one imports pandas)."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-c", "import snakemake.cli"],
                            capture_output=True, text=True, check=True)
    rows = []  # (indent, name, cumulative seconds); a module's imports are listed before it, deeper
    for line in result.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            name = parts[2].rstrip()
            rows.append((len(name) - len(name.lstrip()), name.strip(), int(parts[1]) / 1e6))
    cli = next((seconds for _, name, seconds in rows if name == "snakemake.cli"), 0.0)
    plugin_rows = [row for row in rows if row[1].startswith("snakemake_executor_plugin_slurm")]
    top = min((indent for indent, _, _ in plugin_rows), default=0)
    plugin = sum(seconds for indent, _, seconds in plugin_rows if indent == top)
    return {"import_snakemake_cli_s": round(cli, 2),
            "import_slurm_plugin_s": round(plugin, 2)}


def dry_run_outputs(output: str) -> list[str]:
    """Every output path in a dry-run's printed job blocks."""
    found = []
    for line in output.splitlines():
        if line.startswith("    output: "):
            found += [item.strip() for item in line.removeprefix("    output: ").split(",")]
    return found


def write_seed_record(data_root: Path) -> None:
    """The seed record for --quick (no run behind it: --touch never reads the store)."""
    record = {
        "job": SEED, "user": "bench", "scheduler": "iris", "cluster": "cw-bench",
        "chain": [f"/bench/{SEED}", f"/bench/{SEED}-r1"], "store": f"s3://runs/iris/{SEED}",
        "checkpoint": {"interval": 20, "rule": {"kind": "ema_max", "metric": "reward/avg_raw_reward", "alpha": 0.3333}},
    }
    import yaml

    (data_root / "records" / f"{SEED}.yaml").write_text(yaml.safe_dump(record, sort_keys=False))


def restore_dir_mtimes(source: Path, dest: Path) -> None:
    for dirpath, _, _ in sorted(os.walk(source), key=lambda item: -item[0].count(os.sep)):
        target = dest / Path(dirpath).relative_to(source)
        if target.is_dir():
            shutil.copystat(dirpath, target)


def planned_job_count(output: str) -> int:
    match = re.search(r"^total\s+(\d+)", output, re.MULTILINE)
    return int(match.group(1)) if match else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 jobs, seed completed by --touch (< 30 s)")
    parser.add_argument("--jobs", type=int, default=None, help="number of jobs (default 1000, --quick 10)")
    parser.add_argument("--keep", type=Path, help="build the data roots here and keep them")
    args = parser.parse_args()
    n_jobs = args.jobs or (10 if args.quick else 1000)
    work = args.keep or Path(tempfile.mkdtemp(prefix="rlkeep-bench-planning-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        figures = measure(work, n_jobs, args.quick)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    for key in list(figures):
        print(f"{key}: {figures[key]}", file=sys.stderr)
    figures = {"bench": "planning", **figures, "target_s": TARGET_S,
               "peak_rss_source": "os.wait4 ru_maxrss of the snakemake process (via a small runner)"}
    figures["target_met"] = bool(figures[f"dryrun_fresh_{n_jobs}_s"] < TARGET_S and figures[f"noop_{n_jobs}_s"] < TARGET_S)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
