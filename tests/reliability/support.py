"""Shared pieces of the reliability suite: full runs with publication, kill-able pipelines, a clean
reference run, and the checks that say nothing was lost, half-written or leaked.

A full run with publication is built as tests/test_pipeline_full.py builds it
(tests/support/publishing.py); everything here talks to the real servers the fixtures start (SeaweedFS, the Hub
server, the Iris stand-in) through the real pipeline in a subprocess.
"""
from __future__ import annotations

import copy
import dataclasses
import gzip
import hashlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

from rlkeep_dev.devserver.hub import HubServer, RepoRef
from rlkeep.storage import open_store
from tests.conftest import IrisStandin, run_snakemake, seed_example
from tests.support.hub import new_token, running_hub
from tests.support.publishing import env_for, publish_overrides  # noqa: F401 - used by the suite

REPO = Path(__file__).resolve().parents[2]
JOB = "rl-demo"
N_TRIALS = 24
SOAK = os.environ.get("RLKEEP_SOAK") == "1"
TEMP_MARKERS = (".part", ".tmp-", ".partial", ".example-tmp-")


# --------------------------------------------------------------------------- running the pipeline


def snakemake_command(*targets: str, extra: tuple[str, ...] = (), config: tuple[str, ...] = (),
                      profile: str = "local") -> list[str]:
    """What `run_snakemake` runs (targets before --config), for Popen."""
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
               "--profile", str(REPO / "profiles" / profile), *targets, *extra]
    if config:
        command += ["--config", *config]
    return command


# --------------------------------------------------------------------------- a pipeline that can be killed


class Pipeline:
    """The real pipeline in its own session (process group), so SIGKILL reaches every job it started."""

    def __init__(self, data_root: Path, *targets: str, env: dict[str, str], config: tuple[str, ...] = (),
                 extra: tuple[str, ...] = (), name: str = "run", default_signals: bool = False) -> None:
        self.data_root = data_root
        self.command = snakemake_command(*targets, extra=extra, config=config)
        logs = data_root.parent / "pipeline-output"
        logs.mkdir(exist_ok=True)
        self.out_path = logs / f"{name}.out"
        self.err_path = logs / f"{name}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.process = subprocess.Popen(self.command, cwd=data_root, env={**os.environ, **env}, stdout=out,
                                            stderr=err, start_new_session=True,
                                            preexec_fn=default_signal_actions if default_signals else None)

    def running(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group (Snakemake and every job), like a power loss."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=60)
        deadline = time.monotonic() + 10
        while _group_alive(self.process.pid) and time.monotonic() < deadline:
            time.sleep(0.02)

    def wait(self, timeout: float = 600) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def output(self) -> str:
        return self.out_path.read_text(errors="replace") + self.err_path.read_text(errors="replace")


def default_signal_actions() -> None:
    """In a child: SIGINT, SIGTERM and SIGHUP act as in a terminal session (a test runner started
    in the background of a shell inherits SIGINT ignored, and would pass that on)."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def unlock(data_root: Path, target: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The documented recovery after a kill: `snakemake --profile ... <job>/DONE --unlock`."""
    return run_snakemake(data_root, target, extra=("--unlock",), env=env)


# --------------------------------------------------------------------------- a seeded scenario


@dataclass
class Scenario:
    """One generated run in the store, its record, the Iris stand-in and (optionally) a Hub."""

    data_root: Path
    bucket: str
    iris: IrisStandin
    run: Any
    record: dict[str, Any]
    hub: HubServer | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def job_dir(self) -> Path:
        return self.data_root / self.record["job"]

    def env(self, **more: str) -> dict[str, str]:
        env = {**self.iris.env(), **(env_for(self.hub) if self.hub else {}), **self.extra_env}
        env.update(more)
        return env

    def store_keys(self) -> dict[str, int]:
        return {info.key: info.size for info in open_store(self.record["store"]).list()}

    @property
    def s3_secret(self) -> str:
        return os.environ["AWS_SECRET_ACCESS_KEY"]


def run_logged(scenario: Scenario, *targets: str, config: tuple[str, ...] = (), extra: tuple[str, ...] = (),
               **env: str) -> subprocess.CompletedProcess[str]:
    """The pipeline for this scenario (its Iris stand-in, its Hub), plus `env` overrides."""
    return run_snakemake(scenario.data_root, *targets, extra=extra, config=config, env=scenario.env(**env))


def seed(data_root: Path, bucket: str, iris: IrisStandin, hub: HubServer | None = None, *, publish: bool = True,
         n_trials: int = N_TRIALS, job: str = JOB, **example_options: Any) -> Scenario:
    overrides = publish_overrides(bucket, data_root, job) if publish else {}
    run, record = seed_example(data_root, bucket, iris, job=job, n_trials=n_trials, record_overrides=overrides,
                               **example_options)
    return Scenario(data_root, bucket, iris, run, record, hub)


# --------------------------------------------------------------------------- the clean reference run


@dataclass(frozen=True)
class Reference:
    """What a clean, uninterrupted, fault-free run of the example produces."""

    done: dict[str, Any]  # stable fields, before reclamation
    done_reclaimed: dict[str, Any]  # stable fields after the authorized reclamation
    tar_sha256: dict[str, str]  # logs / trace_jobs -> sha256 of the sync tar
    export_files: dict[str, str]  # model file -> sha256
    trace_shards: dict[str, str]  # staged data/*.parquet -> sha256
    store_keys: dict[str, int]  # the source objects before reclamation
    seconds: float


_references: dict[tuple[Any, ...], Reference] = {}


def clean_reference(s3_server: Any, root: Path, *, n_trials: int = N_TRIALS) -> Reference:
    """Run the example once, cleanly, with publication and (then) authorized reclamation; memoized
    for the session, across xdist workers too (a JSON file beside the workers' temp folders, made
    under a lock by the first worker that needs it), so every test compares against the same run."""
    key = (id(s3_server), n_trials)
    if key in _references:
        return _references[key]
    # root is <basetemp>/referenceN; under xdist each worker's basetemp sits in the run's shared one
    run_temp = root.parent.parent if os.environ.get("PYTEST_XDIST_WORKER") else root.parent
    shared = run_temp / f"clean-reference-{n_trials}.json"
    with FileLock(f"{shared}.lock"):
        if shared.is_file():
            reference = Reference(**json.loads(shared.read_text()))
        else:
            reference = _run_clean_reference(s3_server, root, n_trials)
            shared.write_text(json.dumps(dataclasses.asdict(reference)))
    _references[key] = reference
    return reference


def _run_clean_reference(s3_server: Any, root: Path, n_trials: int) -> Reference:
    bucket = f"ref-{os.getpid()}-{n_trials}"
    s3_server.create_bucket(bucket)
    data_root = root / "data"
    (data_root / "records").mkdir(parents=True)
    iris = IrisStandin(root / "iris")
    started = time.monotonic()
    with running_hub(root / "hub", token=new_token()) as hub:
        scenario = seed(data_root, bucket, iris, hub, n_trials=n_trials)
        keys = scenario.store_keys()
        first = run_snakemake(data_root, f"{JOB}/DONE", env=scenario.env())
        assert first.returncode == 0, first.stderr[-4000:]
        done = stable_done(scenario)
        tars = tar_digests(scenario.job_dir)
        export = {entry["path"]: entry["sha256"] for entry in read_json(scenario.job_dir / "export.json")["files"]}
        shards = {rel: sha256_file(path) for rel, path in staged_files(scenario.job_dir / "stage" / "traces").items()
                  if rel.endswith(".parquet")}
        second = run_snakemake(data_root, f"{JOB}/DONE", env=scenario.env(), config=(f"reclaim_authorized={JOB}",))
        assert second.returncode == 0, second.stderr[-4000:]
        reclaimed = stable_done(scenario)
    return Reference(done, reclaimed, tars, export, shards, keys, time.monotonic() - started)


# --------------------------------------------------------------------------- reading outputs


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def sha256_file(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def staged_files(root: Path) -> dict[str, Path]:
    """Published files of a tree (hidden paths stay local, as rlkeep.hub does)."""
    if not root.is_dir():
        return {}
    return {path.relative_to(root).as_posix(): path for path in sorted(root.rglob("*"))
            if path.is_file() and not any(part.startswith(".") for part in path.relative_to(root).parts)}


def published_model_files(job_dir: Path) -> dict[str, Path]:
    """What the model repo's main should hold: stage/model/, its README.md replaced by the card that
    links the verified trace dataset once link_model_card wrote it (stage/model_card/README.md)."""
    files = staged_files(job_dir / "stage" / "model")
    card = job_dir / "stage" / "model_card" / "README.md"
    if files and card.is_file():
        files["README.md"] = card
    return files


def tar_digests(job_dir: Path) -> dict[str, str]:
    return {name: sha256_file(job_dir / "sync" / f"{name}.tar") for name in ("logs", "trace_jobs")
            if (job_dir / "sync" / f"{name}.tar").is_file()}


UNSTABLE_DONE_FIELDS = ("completed_at",)


def stable_done(scenario: Scenario) -> dict[str, Any]:
    """DONE without what legitimately differs between two good runs: times, commit ids, the rlkeep
    revision, and the names of this run's bucket and data root."""
    done = copy.deepcopy(read_json(scenario.job_dir / "DONE"))
    for name in UNSTABLE_DONE_FIELDS:
        done.pop(name, None)
    # the digest of this scenario's own record (which names its bucket and data root): checked, then
    # set aside; a DONE that describes another record keeps the difference for the comparison to show
    record = scenario.data_root / "records" / f"{scenario.record['job']}.yaml"
    if done.get("record_sha256") == hashlib.sha256(record.read_bytes()).hexdigest():
        done.pop("record_sha256")
    if isinstance(done.get("destinations"), dict):
        done["destinations"].pop("model_commit", None)
        done["destinations"].pop("traces_commit", None)
    done.get("source_revision", {}).pop("rlkeep", None)
    if isinstance(done.get("registration"), dict):
        done["registration"].pop("registered_at", None)
    text = json.dumps(done, sort_keys=True)
    text = text.replace(scenario.bucket, "<bucket>").replace(str(scenario.data_root), "<data_root>")
    done = json.loads(text)
    # each run's local Hub has a port of its own: the published repos' URLs keep their path only
    if isinstance(done.get("destinations"), dict):
        for name in ("model_url", "traces_url"):
            if isinstance(done["destinations"].get(name), str):
                done["destinations"][name] = re.sub(r"^https?://[^/]+", "<hub>", done["destinations"][name])
    return done


def output_problems(job_dir: Path) -> list[str]:
    """Targets that exist but do not hold what their evidence says (a partial target taken as complete)."""
    problems: list[str] = []
    for name in ("logs", "trace_jobs"):
        manifest_path = job_dir / "sync" / f"{name}.manifest.json"
        if manifest_path.is_file():
            manifest = read_json(manifest_path)
            tar = job_dir / "sync" / f"{name}.tar"
            if not tar.is_file():
                problems.append(f"{manifest_path.name} exists without {tar.name}")
            elif sha256_file(tar) != manifest["sha256"] or tar.stat().st_size != manifest["tar_bytes"]:
                problems.append(f"{tar.name} does not match the sha256/size in {manifest_path.name}")
    export_path = job_dir / "export.json"
    if export_path.is_file():
        expected = {entry["path"]: (entry["size"], entry["sha256"]) for entry in read_json(export_path)["files"]}
        actual = {rel: (path.stat().st_size, sha256_file(path)) for rel, path in staged_files(job_dir / "model").items()}
        if expected != actual:
            problems.append(f"model/ differs from export.json: {sorted(set(expected.items()) ^ set(actual.items()))[:4]}")
    for name, expected in (("model_upload", staged_files), ("model", lambda _: published_model_files(job_dir))):
        verify_model = job_dir / "verify" / f"{name}.json"
        if not (verify_model.is_file() and read_json(verify_model).get("status") == "completed"):
            continue
        stage = job_dir / "stage" / "model"
        if not stage.is_dir():
            problems.append(f"verify/{name}.json exists but stage/model/ is gone")
        else:
            evidence = {f["path"]: f["sha256"] for f in read_json(verify_model)["files"]}
            staged = {rel: sha256_file(path) for rel, path in expected(stage).items()}
            if {k: v for k, v in evidence.items() if k != ".gitattributes"} != staged:
                problems.append(f"verify/{name}.json lists other files than stage/model/ holds")
    verify_traces = job_dir / "verify" / "traces.json"
    if verify_traces.is_file() and read_json(verify_traces).get("status") == "completed":
        stage = job_dir / "stage" / "traces"
        evidence = {s["path"]: s["sha256"] for s in read_json(verify_traces)["shards"]}
        staged = {rel: sha256_file(p) for rel, p in staged_files(stage).items() if rel.endswith(".parquet")}
        if evidence != staged:
            problems.append("verify/traces.json lists other shards than stage/traces/ holds")
    redaction = job_dir / "stage" / "model.redaction.json"
    if redaction.is_file() and not (job_dir / "stage" / "model").is_dir():
        problems.append("stage/model.redaction.json exists without stage/model/")
    manifest = job_dir / "archive" / "MANIFEST"
    if manifest.is_file() and not (job_dir / "archive" / f"{job_dir.name}_archive.tgz").is_file():
        problems.append("archive/MANIFEST exists without the archive")
    return problems


def leftovers(job_dir: Path) -> list[str]:
    """Temporary files or folders (names rlkeep gives work in progress) still under the job folder."""
    found = []
    for path in job_dir.rglob("*"):
        if any(marker in path.name for marker in TEMP_MARKERS) and path.name.startswith("."):
            found.append(path.relative_to(job_dir).as_posix())
    return sorted(found)


# --------------------------------------------------------------------------- the Hub, seen from the server


def hub_head(hub: HubServer, repo_id: str, repo_type: str = "model") -> tuple[str | None, dict[str, dict[str, Any]]]:
    """(main's commit, path -> entry) as the server holds it; (None, {}) when the repo is absent."""
    ref = RepoRef(repo_type, repo_id)
    if not hub.store.repo_exists(ref):
        return None, {}
    sha = hub.store.resolve(ref, "main")
    return sha, dict(hub.store.files_at(ref, sha))


def hub_history(hub: HubServer, repo_id: str, repo_type: str = "model") -> list[str]:
    ref = RepoRef(repo_type, repo_id)
    if not hub.store.repo_exists(ref):
        return []
    return [entry["id"] for entry in hub.store.history(ref, hub.store.resolve(ref, "main"))]


def hub_file(hub: HubServer, repo_id: str, path: str, repo_type: str = "model") -> bytes:
    ref = RepoRef(repo_type, repo_id)
    files = hub.store.files_at(ref, hub.store.resolve(ref, "main"))
    return hub.store.content_path(ref, files[path]).read_bytes()


def publication_problems(scenario: Scenario) -> list[str]:
    """The Hub's main of each repo holds exactly one copy of each staged path, with staging's content
    (LFS entries by sha256, regular files by git blob id), and nothing else but `.gitattributes`."""
    from rlkeep.hub import git_blob_sha1_file

    assert scenario.hub is not None
    publish = scenario.record["publish"]
    problems = []
    for name, repo_type in (("model", "model"), ("traces", "dataset")):
        _, remote = hub_head(scenario.hub, publish[name], repo_type)
        stage = published_model_files(scenario.job_dir) if name == "model" else \
            staged_files(scenario.job_dir / "stage" / name)
        paths = {path for path in remote if path != ".gitattributes"}
        if paths != set(stage):
            problems.append(f"{repo_type} repo paths differ from staging: {sorted(paths ^ set(stage))[:6]}")
        for rel, path in stage.items():
            entry = remote.get(rel)
            if entry is None:
                continue
            same = (entry["lfs"]["sha256"] == sha256_file(path)) if "lfs" in entry \
                else (entry["oid"] == git_blob_sha1_file(path))
            if not same:
                problems.append(f"{repo_type} repo {rel}: other content than staging")
    return problems


@contextmanager
def hub_intercept(hub: HubServer, callback: Callable[[str, str], None]) -> Iterator[None]:
    """Call `callback(kind, path)` for every request the server takes, before it is handled.

    Server-side instrumentation of the real server, at the point where it applies its own injected
    faults: the callback may hold the request (slow answer), raise the server's HubError (a failed
    answer) or change the repo (someone else's edit). The client in the pipeline is untouched.
    """
    original = hub._take_fault

    def take_fault(kind: str) -> None:
        callback(kind, _request_path())
        original(kind)

    hub._take_fault = take_fault  # type: ignore[method-assign]
    try:
        yield
    finally:
        hub._take_fault = original  # type: ignore[method-assign]


@contextmanager
def hub_gate(hub: HubServer, kinds: set[str], *, repo_part: str = "") -> Iterator["Gate"]:
    """Hold requests of the given kinds (and whose path contains repo_part) until released: a kill
    then lands while the client waits for that answer."""
    gate = Gate(kinds, repo_part)

    def hold(kind: str, path: str) -> None:
        if gate.armed and kind in gate.kinds and gate.repo_part in path:
            generation = gate.generation
            gate.arrived.append((kind, path))
            deadline = time.monotonic() + gate.timeout
            while gate.armed and gate.generation == generation and time.monotonic() < deadline:
                time.sleep(0.01)

    with hub_intercept(hub, hold):
        try:
            yield gate
        finally:
            gate.armed = False


@dataclass
class ScopedFaults:
    """Like HubServer.fail_next, but only for requests whose path contains `repo_part`: two repos can
    fail at once, each at its own protocol step. Counts are per (kind, repo_part)."""

    status: int = 500
    remaining: dict[tuple[str, str], int] = field(default_factory=dict)
    injected: Counter = field(default_factory=Counter)

    def fail_next(self, kind: str, count: int, repo_part: str) -> None:
        self.remaining[(kind, repo_part)] = count

    def __call__(self, kind: str, path: str) -> None:
        from rlkeep_dev.devserver.hub import HubError

        for (want, part), count in self.remaining.items():
            if want == kind and part in path and count > 0:
                self.remaining[(want, part)] = count - 1
                self.injected[kind] += 1
                raise HubError(self.status, f"injected fault: {kind} request failed with HTTP {self.status}")


@dataclass
class RemoteEditAfterCommit:
    """Someone else edits `path` of the model repo right after our commit landed, before we verify:
    the first request to the repo after our commit request finds the edit already there."""

    hub: HubServer
    repo_id: str
    path: str
    content: bytes
    seen_commit: bool = False
    edited_commit: str | None = None

    def __call__(self, kind: str, path: str) -> None:
        in_repo = f"/{self.repo_id}" in path and "/datasets/" not in path
        if not in_repo or self.edited_commit is not None:
            return
        if kind == "commit":
            self.seen_commit = True
        elif self.seen_commit:
            self.edited_commit = self.hub.edit_file(self.repo_id, self.path, self.content)


def _request_path() -> str:
    """The raw path of the request this server thread is handling (its handler is up the stack)."""
    frame = sys._getframe(1)
    while frame is not None:
        handler = frame.f_locals.get("self")
        if hasattr(handler, "raw_path") and hasattr(handler, "segments"):
            return str(handler.raw_path)
        frame = frame.f_back
    return ""


@dataclass
class Gate:
    kinds: set[str]
    repo_part: str
    armed: bool = True
    timeout: float = 30.0
    arrived: list[tuple[str, str]] = field(default_factory=list)
    generation: int = 0  # a request held before rearm() is let go

    def release(self) -> None:
        self.armed = False

    def rearm(self) -> None:
        """Let go of whatever is held and hold the next matching request again."""
        self.generation += 1
        self.arrived.clear()
        self.armed = True


# --------------------------------------------------------------------------- destinations, for leak scans


def archive_destination_files(bucket: str) -> list[tuple[str, bytes]]:
    """Every object at the archive destination, and every member of its tgz, as (name, bytes)."""
    store = open_store(f"s3://{bucket}/archives")
    found: list[tuple[str, bytes]] = []
    for info in store.list():
        data = store.read_bytes(info.key)
        found.append((info.key, data))
        if info.key.endswith(".tgz"):
            with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as tar:
                for member in tar:
                    if member.isfile():
                        found.append((f"{info.key}:{member.name}", tar.extractfile(member).read()))
    return found


def hub_bytes(hub: HubServer) -> list[tuple[str, str, bytes]]:
    from rlkeep_dev.devserver.hub import stored_blobs

    return list(stored_blobs(hub.root))


def tar_bytes(members: dict[str, bytes | tuple[str, str]]) -> bytes:
    """A tar from name -> content, or name -> ("symlink" | "hardlink", target)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            if isinstance(content, tuple):
                info.type = tarfile.SYMTYPE if content[0] == "symlink" else tarfile.LNKTYPE
                info.linkname = content[1]
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
