"""`make demo`: the whole pipeline on a realistic finished run, on this machine only.

Starts the embedded services on 127.0.0.1 (SeaweedFS as the object store, the Hub-compatible
server), seeds a generated SkyRL + Harbor run into the store once, writes its job record and
the Iris stand-in's state, runs `snakemake --profile <repo>/profiles/local rl-demo/DONE` (with the
`--config` values given), prints the completion record and ends with the path of the campaign page
(campaign/index.html). A second run reuses the services' data and finds nothing to do; the closing
hint (reclaim with authority) is such a second run. Ctrl-C lets Snakemake finish its clean-up and
stops the services (rlkeep_dev.interrupts): the same command then goes on, the services on new ports.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import secrets
import shlex
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import yaml

from rlkeep.jsonio import write_json
from rlkeep.profiles import project_root
from rlkeep.registry import register_base_model
from rlkeep.storage import open_store, upload_tree
from rlkeep_dev.devserver.hub import HubServer
from rlkeep_dev.devserver.iris import install_executable
from rlkeep_dev.devserver.launch import hub_env
from rlkeep_dev.devserver.noslurm import no_cluster_env
from rlkeep_dev.devserver.s3 import S3Server
from rlkeep_dev.example import iris_state, write_example_run
from rlkeep_dev.interrupts import Stopped, run_to_its_end, stops_deferred, stops_raise

JOB = "rl-demo"
USER = "demo"
BUCKET = "runs"


def seed_store(services: Path, env: dict[str, str]) -> dict:
    """Generate the example run and upload it once; returns its record."""
    marker = services / "seeded.json"
    if marker.is_file():
        return json.loads(marker.read_text())
    store_url = f"s3://{BUCKET}/iris/{JOB}"
    with tempfile.TemporaryDirectory(prefix="rlkeep-demo-") as tmp:
        run = write_example_run(Path(tmp) / "run", job=JOB, user=USER)
        os.environ.update(env)
        count = upload_tree(run.root, open_store(store_url))
        record = run.record(
            store_url=store_url,
            scheduler="iris",
            cluster="cw-local",
            publish={"model": f"{USER}/{JOB}", "traces": f"{USER}/{JOB}-traces", "private": True},
            base_model="demo/tiny-qwen3-base",
        )
        write_json(services / "iris-state.json", iris_state(run))
    seeded = {"record": record, "objects": count, "store": store_url}
    write_json(marker, seeded)
    return seeded


@contextmanager
def demo_services(data_root: Path) -> Iterator[tuple[dict[str, str], S3Server, HubServer]]:
    """The demo's store and Hub, started on 127.0.0.1 from their data under `<data root>/.services`
    (new ports each time), with the environment a command run against them needs; stopped at the end."""
    services = data_root / ".services"
    services.mkdir(parents=True, exist_ok=True)
    token_file = services / "hub-token"
    if not token_file.exists():
        token_file.write_text(secrets.token_hex(16))
    token = token_file.read_text().strip()
    with ExitStack() as running:
        with stops_deferred():  # a stop while a service starts is raised once `running` will stop it
            s3 = running.enter_context(S3Server(services / "s3"))
            # the Hub as it is today: Xet (huggingface_hub uploads and downloads through its local CAS)
            hub = running.enter_context(HubServer(services / "hub", token=token, xet=True).start())
        env = {
            **s3.env(),
            **hub_env(hub.url, token, base={}),
            "IRIS_STANDIN_STATE": str(services / "iris-state.json"),
            "IRIS_STANDIN_CALLS": str(services / "iris-calls.jsonl"),
            **no_cluster_env(services),  # the demo uses no SLURM cluster: Snakemake starts without scontrol's wait
        }
        yield env, s3, hub


def run_demo(data_root: Path, config: list[str], again: str) -> int:
    """`again`: this very command as the operator can type it again."""
    data_root = data_root.resolve()
    services = data_root / ".services"

    with demo_services(data_root) as (env, s3, hub):
        s3.create_bucket(BUCKET)
        seeded = seed_store(services, env)
        records = data_root / "records"
        records.mkdir(exist_ok=True)
        registry = f"sqlite:///{services / 'registry.db'}"
        register_base_model(registry, hub_id=seeded["record"]["base_model"], owner=USER)  # the operator's explicit act
        record = {**seeded["record"], "register": {"authorized": True, "url": registry},
                  "archive": {"dest": f"s3://{BUCKET}/archives"}}
        record_file = records / f"{JOB}.yaml"
        record_text = yaml.safe_dump(record, sort_keys=True)  # the same text from a fresh seed and from seeded.json
        if not record_file.is_file() or record_file.read_text() != record_text:
            record_file.write_text(record_text)
        bin_dir = install_executable(services / "bin").parent
        env["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
        print(f"rlkeep demo: store {seeded['store']} ({seeded['objects']} objects) on {s3.endpoint}, Hub on {hub.url}")
        repo = project_root()
        command = [sys.executable, "-m", "snakemake", "--snakefile", str(repo / "Snakefile"),
                   "--profile", str(repo / "profiles" / "local"), f"{JOB}/DONE"]
        command += ["--config", *config] if config else []  # after the target: --config takes every word after it
        print("rlkeep demo: " + " ".join(command[2:]), flush=True)
        log = services / SNAKEMAKE_LOG
        print(f"rlkeep demo: Snakemake's whole output is also kept in {log}", flush=True)
        result = run_to_its_end(command, cwd=data_root, env={**os.environ, **env, "PYTHONUNBUFFERED": "1"}, log=log)
    if result.stopped_by is not None:
        print(stopped_message(signal.Signals(result.stopped_by).name, result.running, result.returncode, log, again),
              file=sys.stderr)
        return 128 + result.stopped_by

    done_path = data_root / JOB / "DONE"
    status_path = data_root / JOB / "STATUS.json"
    campaign_page = data_root / "campaign" / "index.html"  # rebuilt by the pipeline after every invocation
    if result.returncode != 0 or not done_path.is_file():
        print(f"rlkeep demo: the pipeline did not complete; see {status_path}", file=sys.stderr)
        if status_path.is_file():
            print(status_path.read_text(), file=sys.stderr)
        if campaign_page.is_file():
            print(f"Campaign page: {campaign_page}", file=sys.stderr)
        return 1
    done = json.loads(done_path.read_text())
    print(f"\nCompletion record: {done_path}\nReport: {data_root / JOB / 'REPORT.md'}\n")
    print(artifact_listing(data_root / JOB))
    shown = {key: done.get(key) for key in ("job", "kind", "terminal_state", "steps", "checkpoint", "destinations",
                                            "artifacts", "registration", "reclaimed", "remaining_work") if key in done}
    # DONE's command assumes the store and Hub are up; the demo's own (below) starts them again
    shown["remaining_work"] = [{k: v for k, v in item.items() if k != "command"}
                               for item in shown.get("remaining_work") or []]
    print(json.dumps(shown, indent=2))
    if (done.get("reclaimed") or {}).get("status") != "completed":
        print(f"\nReclaiming the run's storage needs explicit authority for this job; this starts the services "
              f"again and grants it:\n  {reclaim_command(again, config)}")
    print("\nThe demo's store and Hub stopped with it. To restore the run from its archive, or to check again "
          "everything DONE claims, start them again around the command (it runs in the data root):\n"
          f"  {serve_command(again, ['rlkeep', 'restore', JOB, '--to', f'{JOB}-restored'])}\n"
          f"  {serve_command(again, ['rlkeep', 'audit'])}")
    print(f"\nCampaign page (open it in a browser): {campaign_page}")
    return 0


def serve_command(again: str, command: list[str]) -> str:
    """The demo command that starts the demo's services again and runs `command` against them."""
    words = shlex.split(again)
    if "--config" in words:
        words = words[:words.index("--config")]
    return shlex.join([*words, "--serve", *command])


def serve(data_root: Path, command: list[str]) -> int:
    """`rlkeep demo --serve [COMMAND...]`: the demo's store and Hub again, for `rlkeep restore`, `rlkeep
    audit` or Snakemake after the demo ended. With a command: run it in the data root with their
    environment and stop them when it ends (its exit status). Without: print that environment as
    `export` lines and serve until Ctrl-C."""
    data_root = data_root.resolve()
    if not (data_root / ".services" / "seeded.json").is_file():
        print(f"rlkeep demo --serve: {data_root} holds no demo (no .services/seeded.json); run `rlkeep demo "
              f"--data-root {data_root}` first", file=sys.stderr)
        return 2
    with demo_services(data_root) as (env, s3, hub):
        bin_dir = install_executable(data_root / ".services" / "bin").parent
        # the Iris stand-in, then this Python's scripts (`snakemake`, `rlkeep`) before the caller's PATH
        env["PATH"] = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        print(f"rlkeep demo: store on {s3.endpoint}, Hub on {hub.url} (data in {data_root / '.services'})",
              file=sys.stderr, flush=True)
        if not command:
            for key in sorted(env):
                print(f"export {key}={shlex.quote(env[key])}")
            print("rlkeep demo: serving until Ctrl-C; paste the export lines above into another shell", file=sys.stderr,
                  flush=True)
            while True:
                time.sleep(3600)
        argv = [sys.executable, "-m", "rlkeep", *command[1:]] if command[0] == "rlkeep" else command
        result = run_to_its_end(argv, cwd=data_root, env={**os.environ, **env})
    return result.returncode if result.stopped_by is None else 128 + result.stopped_by


SNAKEMAKE_LOG = "snakemake.log"  # under the data root's .services/: every attempt's Snakemake output, appended


def stopped_message(signal_name: str, running: tuple[str, ...], returncode: int, log: Path, again: str) -> str:
    """What the operator reads after a stop: what was stopped, where the whole output is, the command
    that goes on (a few lines, never Snakemake's unwinding)."""
    what = (f"the running {'step' if len(running) == 1 else 'steps'} {', '.join(running)}" if running
            else "Snakemake between steps")
    return (f"rlkeep demo: stopped by {signal_name}: {what} stopped, Snakemake ended (exit status {returncode}), "
            f"the services are stopped; nothing finished is lost.\n"
            f"Snakemake's whole output: {log}\n"
            f"To go on, run the same command:\n  {again}")


def artifact_listing(job_dir: Path) -> str:
    """The preservation artifacts with their sizes, and what the sync manifests say."""
    lines = ["Artifacts:"]
    for pattern in ("chain.json", "retries.json", "sync/*", "metrics/*", "checkpoint/*", "export.json", "model/*",
                    "stage/*.json", "verify/*", "archive/*", "register.json", "reclaim.json", "DONE", "REPORT.md"):
        for path in sorted(job_dir.glob(pattern)):
            if path.is_file() and not path.name.startswith("."):
                lines.append(f"  {path.relative_to(job_dir.parent)}  {path.stat().st_size:,} bytes")
    for name in ("logs", "trace_jobs"):
        manifest_path = job_dir / "sync" / f"{name}.manifest.json"
        if manifest_path.is_file():
            manifest = json.loads(manifest_path.read_text())
            lines.append(f"  sync/{name}: {manifest['objects_synced']} of {manifest['objects_listed']} objects, "
                         f"{manifest['bytes']:,} bytes, {len(manifest['objects_skipped'])} skipped (each with its "
                         f"reason), tar sha256 {manifest['sha256'][:16]}...")
    return "\n".join(lines)


def launcher() -> list[str]:
    """How to start this rlkeep again from the current directory: the venv's `rlkeep` script beside
    this Python when there is one (`make demo` runs `.venv/bin/python -m rlkeep`), else `python -m rlkeep`."""
    python = Path(sys.executable)
    script = python.with_name("rlkeep")

    def shown(path: Path) -> str:
        absolute = path.absolute()
        return str(absolute.relative_to(Path.cwd())) if absolute.is_relative_to(Path.cwd()) else str(absolute)

    return [shown(script)] if script.is_file() else [shown(python), "-m", "rlkeep"]


def reclaim_command(again: str, config: list[str]) -> str:
    """The same demo command, granting reclamation for the demo job (the other --config values kept)."""
    words = shlex.split(again)
    if "--config" in words:
        words = words[:words.index("--config")]
    kept = [value for value in config if not value.startswith("reclaim_authorized=")]
    return shlex.join([*words, "--config", *kept, f"reclaim_authorized={JOB}"])


def cli_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlkeep demo", description=__doc__)
    parser.add_argument("--data-root", type=Path, default=Path("demo-data"))
    parser.add_argument("--config", nargs="+", default=[], metavar="KEY=VALUE",
                        help="passed to Snakemake's --config, e.g. reclaim_authorized=rl-demo")
    parser.add_argument("--serve", nargs=argparse.REMAINDER, metavar="COMMAND",
                        help="start the demo's store and Hub again (no pipeline run) and run COMMAND in the data "
                             "root against them, e.g. `--serve rlkeep audit`; without COMMAND, serve until Ctrl-C")
    args = parser.parse_args(argv)
    if args.serve is not None:
        try:
            with stops_raise():
                return serve(args.data_root, args.serve)
        except Stopped as stop:
            print(f"rlkeep demo --serve: stopped by {stop}; the services are stopped", file=sys.stderr)
            return 128 + stop.signum
    again = shlex.join([*launcher(), "demo", "--data-root", str(args.data_root),
                        *(["--config", *args.config] if args.config else [])])
    try:
        with stops_raise():
            status = run_demo(args.data_root, args.config, again)
        gc.freeze()  # the services are stopped: the last collection would only walk torch's heap (0.3 s)
        return status
    except Stopped as stop:  # the demo's own work (seeding, starting the services) was stopped
        print(f"rlkeep demo: stopped by {stop}; the services are stopped. To go on, run the same command:\n  {again}",
              file=sys.stderr)
        return 128 + stop.signum
