"""`rlkeep audit`: re-prove, any time after DONE, what each completion record claims.

DONE is proof at the moment it is written. An audit checks again every destination it names,
from the facts its verify sentinels recorded (sizes, sha256s, commits), and what it lists as kept
in the job folder:
- the archive at `archive.dest`: listed with its size, a HEAD with that size (S3), and with
  `--read-data` a fresh full read whose sha256 equals the one `verify/archive.json` recorded;
- the model repo and the trace dataset on the Hub: the commit DONE names still in main's history,
  main's files (LFS sha256 from the tree listing, a regular file by its git blob id, from the local
  staging copy when its sha256 still matches, else read back), the card's `## Training Traces`
  link to the dataset, the shard set and the export manifest;
- the registry row (model, base model, trace dataset, owner, job), read with a SELECT;
- locally: every completed step's evidence, the exported model folder, the metric files and the
  local archive.

Reads only: nothing here writes to a destination (no upload, commit, insert or delete), and the
registry is never created or migrated. Each drift is a Finding with the command that repairs it:
a destination is repaired by rerunning the step that wrote it (from the kept archive or staging),
`--forcerun` so Snakemake runs it although its sentinel is present; a missing local file by
naming it as the target (Snakemake rebuilds a missing target, and its unchanged content leaves
every later step, and DONE, as they are).

The checks are pure functions of the recorded facts and what a destination answered
(`*_findings`); `audit_job` is the edge that asks the destinations; `cli_main` the command.
"""
from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rlkeep.errors import RlkeepError
from rlkeep.jsonio import read_json, write_json
from rlkeep.pipeline import STEP_BY_NAME, STEPS

AUDIT_FILE = "verify/audit.json"
DEFAULT_INVOCATION = "snakemake --profile iris"
CARD = "README.md"
TRACES_HEADING = "## Training Traces"
TRACE_MANIFEST = "trace_export_manifest.json"
# files the Hub adds to every repo (rlkeep.hub.trees.ALLOWED_REMOTE_EXTRAS): never drift
HUB_EXTRAS = frozenset({".gitattributes"})


@dataclass(frozen=True)
class Finding:
    """One thing that no longer is as DONE says."""

    destination: str  # local | archive | model | traces | registry
    subject: str  # the file, object, repo path or registry row
    problem: str
    repair: str | None = None  # the command that brings it back, where one exists
    step: str | None = None  # the pipeline step whose output it is

    def line(self, job: str) -> str:
        text = f"{job}: {self.destination} {self.subject}: {self.problem}"
        return text + (f"; repair: {self.repair}" if self.repair else "; no repair command: see the audit's notes")


def rerun_command(job: str, step: str, invocation: str = DEFAULT_INVOCATION) -> str:
    """Rerun `step` (its sentinel is present, so forced) and what follows it up to DONE: the
    destination is written again from what the job folder keeps (archive, staging, register)."""
    return f"{invocation} {job}/DONE --forcerun {step}"  # --forcerun takes every word after it: target first


def rebuild_command(job: str, target: str, invocation: str = DEFAULT_INVOCATION, *, force: str | None = None) -> str:
    """Rebuild one local file or folder by naming it: Snakemake makes a missing target again;
    `force` names the rule when the target is present but changed."""
    return f"{invocation} {job}/{target}" + (f" --forcerun {force}" if force else "")


# --------------------------------------------------------------------------- local (pure, no network)


def _sentinel(job_dir: Path, relpath: str) -> dict[str, Any]:
    try:
        data = read_json(job_dir / relpath)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def local_findings(job_dir: Path, done: Mapping[str, Any], *, invocation: str = DEFAULT_INVOCATION,
                   hash_files: bool = False) -> tuple[list[str], list[Finding]]:
    """(what was checked, what drifted) in the job folder against DONE: each completed step's
    evidence, the exported model's files (size; sha256 with hash_files), the metric files DONE
    lists and the local archive. Cheap without hash_files (stat calls): STATUS.json runs it."""
    job = job_dir.name
    checked: list[str] = []
    findings: list[Finding] = []
    when = done.get("completed_at") or "its writing"
    steps = done.get("steps") or {}
    for step in STEPS:
        if steps.get(step.name) != "completed" or step.evidence is None:
            continue
        checked.append(f"local {step.evidence}")
        if not (job_dir / step.evidence).exists():
            findings.append(Finding("local", step.evidence, f"missing; DONE ({when}) says {step.name} completed",
                                    rebuild_command(job, step.evidence, invocation), step.name))
    export = done.get("export") if isinstance(done.get("export"), dict) else None
    if export and steps.get("export_model") == "completed":
        model = job_dir / "model"
        checked.append("local model/")
        problems = []
        for entry in export.get("files") or []:
            path = model / str(entry.get("path"))
            if not path.is_file():
                problems.append(f"{entry.get('path')} missing")
            elif path.stat().st_size != entry.get("size"):
                problems.append(f"{entry.get('path')} has {path.stat().st_size} bytes, DONE says {entry.get('size')}")
            elif hash_files and _sha256(path) != entry.get("sha256"):
                problems.append(f"{entry.get('path')} sha256 differs from DONE's")
        if problems:
            rule = STEP_BY_NAME["export_model"].name
            force = rule if model.is_dir() else None
            findings.append(Finding("local", "model/", "; ".join(problems) + f" (DONE {when} lists "
                                    f"{len(export.get('files') or [])} exported files)",
                                    rebuild_command(job, "model", invocation, force=force), rule))
    evidence = {step.evidence for step in STEPS}
    for relpath in done.get("metrics") or []:
        if relpath in evidence:
            continue
        checked.append(f"local {relpath}")
        if not (job_dir / relpath).is_file():
            findings.append(Finding("local", relpath, f"missing; DONE ({when}) lists it",
                                    rebuild_command(job, relpath, invocation)))
    archived = _sentinel(job_dir, "verify/archive.json").get("local")
    if isinstance(archived, dict) and steps.get("archive") == "completed":
        tgz = job_dir / "archive" / f"{job}_archive.tgz"
        checked.append(f"local archive/{tgz.name}")
        if not tgz.is_file():
            problem = "missing"
        elif tgz.stat().st_size != archived.get("tgz_bytes"):
            problem = f"{tgz.stat().st_size} bytes, verify/archive.json says {archived.get('tgz_bytes')}"
        elif hash_files and _sha256(tgz) != archived.get("sha256"):
            problem = "sha256 differs from the one verify/archive.json recorded"
        else:
            problem = None
        if problem:
            # rebuilt, uploaded and rehearsed again: a new archive's bytes need a new proof
            findings.append(Finding("local", f"archive/{tgz.name}", problem, rerun_command(job, "archive", invocation),
                                    "archive"))
    return checked, findings


def damaged_steps(job_dir: Path, invocation: str = DEFAULT_INVOCATION) -> dict[str, Finding]:
    """For a job with DONE: each step whose output DONE relies on is missing or changed, with the
    finding (STATUS.json and the pages show these steps as blocked, never done)."""
    try:
        done = read_json(job_dir / "DONE")
    except (OSError, ValueError):
        return {}
    if not isinstance(done, dict):
        return {}
    found: dict[str, Finding] = {}
    for finding in local_findings(job_dir, done, invocation=invocation)[1]:
        step = finding.step or _producing_step(finding.subject)
        if step is not None:
            found.setdefault(step, finding)
    return found


def _producing_step(relpath: str) -> str | None:
    """The step a metric file belongs with: the one whose evidence sits in the same folder and
    names it, else the metric surface's (a table beside metrics.csv)."""
    for step in STEPS:
        if step.evidence == relpath:
            return step.name
    return "metric_surface" if relpath.startswith("metrics/") else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --------------------------------------------------------------------------- remote facts (pure)


def archive_findings(job: str, objects: list[Mapping[str, Any]], listed: Mapping[str, int],
                     headed: Mapping[str, int | None], read: Mapping[str, tuple[int, str] | None], base: str,
                     invocation: str = DEFAULT_INVOCATION) -> list[Finding]:
    """The archive objects verify/archive.json recorded ({key, size, sha256}) against what the
    destination answered: its listing {key: size}, HEAD {key: size or None when missing} (S3
    only) and, with --read-data, a fresh read {key: (size, sha256) or None when missing}."""
    repair = rerun_command(job, "verify_archive", invocation)
    findings = []
    for item in objects:
        key, size, sha = str(item["key"]), item.get("size"), item.get("sha256")
        url = f"{base.rstrip('/')}/{key}"
        if key not in listed:
            findings.append(Finding("archive", url, "missing from the listing of its folder", repair, "verify_archive"))
            continue
        if listed[key] != size:
            findings.append(Finding("archive", url, f"listed with {listed[key]} bytes, verified with {size}", repair,
                                    "verify_archive"))
            continue
        if key in headed and headed[key] != size:
            what = "a HEAD answers no such object" if headed[key] is None else f"a HEAD gives {headed[key]} bytes"
            findings.append(Finding("archive", url, f"{what}, verified with {size}", repair, "verify_archive"))
            continue
        if key in read:
            got = read[key]
            if got is None:
                findings.append(Finding("archive", url, "a read answers no such object", repair, "verify_archive"))
            elif got != (size, sha):
                findings.append(Finding("archive", url, f"a full read gave {got[0]} bytes with sha256 {got[1]}, "
                                        f"verified: {size} bytes with sha256 {sha}", repair, "verify_archive"))
    return findings


@dataclass(frozen=True)
class RemoteFile:
    """A file of a Hub repo at main as its tree listing gives it."""

    size: int
    lfs_sha256: str | None
    blob_id: str | None


def repo_file_findings(destination: str, repo_id: str, expected: Mapping[str, Mapping[str, Any]],
                       remote: Mapping[str, RemoteFile], blob_of: Callable[[str], str | None],
                       sha_of: Callable[[str], str | None], repair: str, step: str) -> list[Finding]:
    """Files a verify sentinel recorded ({path: {size, sha256}}) against main's tree. A regular
    file's git blob id is compared with the blob id of the recorded bytes where known (`blob_of`:
    the local staging copy whose sha256 still matches), else its content is read back (`sha_of`)."""
    findings = []
    for path in sorted(expected.keys() - remote.keys()):
        findings.append(Finding(destination, f"{repo_id}/{path}", "missing from main", repair, step))
    for path in sorted(remote.keys() - expected.keys() - HUB_EXTRAS):
        findings.append(Finding(destination, f"{repo_id}/{path}", "on main but not in what was verified", repair, step))
    for path in sorted(expected.keys() & remote.keys()):
        want, got = expected[path], remote[path]
        if want.get("size") is not None and got.size != want.get("size"):
            findings.append(Finding(destination, f"{repo_id}/{path}",
                                    f"{got.size} bytes on main, verified with {want.get('size')}", repair, step))
        elif got.lfs_sha256 is not None:
            if got.lfs_sha256 != want.get("sha256"):
                findings.append(Finding(destination, f"{repo_id}/{path}", f"LFS sha256 {got.lfs_sha256} on main, "
                                        f"verified {want.get('sha256')}", repair, step))
        else:
            blob = blob_of(path)
            same = (got.blob_id == blob) if blob is not None else (sha_of(path) == want.get("sha256"))
            if not same:
                findings.append(Finding(destination, f"{repo_id}/{path}", "content on main differs from what was "
                                        "verified", repair, step))
    return findings


def history_finding(destination: str, repo_id: str, commit: str | None, head: str, history: Iterable[str] | None,
                    repair: str, step: str) -> list[Finding]:
    """DONE's commit must be main's head or in its history (None: not read, as head == commit)."""
    if not commit or commit == head or (history is not None and commit in set(history)):
        return []
    return [Finding(destination, f"{repo_id}@{commit}", f"DONE's commit is no longer in the history of main "
                    f"(now {head})", repair, step)]


def card_link_findings(repo_id: str, card_text: str | None, dataset: str, repair: str) -> list[Finding]:
    """The model card's `## Training Traces` section must link the trace dataset (by repo id)."""
    from rlkeep.hub.checks import dataset_links, markdown_section  # regex helpers, no Hub client

    if card_text is None:
        return [Finding("model", f"{repo_id}/{CARD}", "no model card on main", repair, "link_model_card")]
    section = markdown_section(card_text, TRACES_HEADING)
    if section is None:
        return [Finding("model", f"{repo_id}/{CARD}", f"the card has no '{TRACES_HEADING}' section", repair,
                        "link_model_card")]
    if dataset not in dataset_links(section):
        return [Finding("model", f"{repo_id}/{CARD}", f"the card's '{TRACES_HEADING}' section does not link the "
                        f"dataset {dataset}", repair, "link_model_card")]
    return []


def registry_findings(job: str, registration: Mapping[str, Any], row: Mapping[str, Any] | None, safe_url: str,
                      invocation: str = DEFAULT_INVOCATION) -> list[Finding]:
    """The registry row register.json recorded against the row read now (None: no such row)."""
    repair = rerun_command(job, "register", invocation)
    subject = f"{safe_url} models/{registration.get('model')}"
    if row is None:
        return [Finding("registry", subject, "no model row", repair, "register")]
    problems = [f"{key} is {row.get(key)!r}, registered {registration.get(key)!r}"
                for key in ("job", "owner", "base_model", "trace_dataset", "training_type")
                if key in registration and row.get(key) != registration.get(key)]
    return [Finding("registry", subject, "; ".join(problems), repair, "register")] if problems else []


def read_data_chosen(job: str, fraction: float, day: str) -> bool:
    """Whether this audit reads this job's archive in full: every job at 1, else a fraction chosen by
    a hash of the job and the day, so audits on successive days read different runs."""
    if fraction >= 1:
        return True
    if fraction <= 0:
        return False
    value = int.from_bytes(hashlib.sha256(f"{job}\0{day}".encode()).digest()[:8], "big")
    return value < fraction * 2**64


# --------------------------------------------------------------------------- the edge: asking the destinations


class _DiscardSink:
    """A rewindable sink that keeps nothing (read_into hashes what it reads)."""

    def __init__(self) -> None:
        self.position = 0

    def write(self, data: bytes) -> int:
        self.position += len(data)
        return len(data)

    def tell(self) -> int:
        return self.position

    def seek(self, position: int, whence: int = 0) -> int:
        self.position = position
        return position

    def truncate(self, size: int | None = None) -> int:
        return self.position


def audit_archive(job: str, verified: Mapping[str, Any], read_data: bool, invocation: str) -> tuple[list[str], list[Finding]]:
    from rlkeep.storage import ObjectMissing, S3Store, open_store

    remote = verified.get("remote")
    if not verified:
        return ["archive: not checked: verify/archive.json, which records what was uploaded, is missing (a local "
                "finding names the command that brings it back)"], []
    if not isinstance(remote, dict):
        return [], []
    base, objects = str(remote["dest"]), list(remote.get("objects") or [])
    if base.startswith("hf://"):
        return [f"archive {base}: not audited (a Hub dataset archive is checked by its own verification)"], []
    store = open_store(base)
    listed = {info.key: info.size for info in store.list("")}
    headed: dict[str, int | None] = {}
    read: dict[str, tuple[int, str] | None] = {}
    for item in objects:
        key = str(item["key"])
        if key not in listed:
            continue
        if isinstance(store, S3Store):
            try:
                headed[key] = store.head(key).size
            except ObjectMissing:
                headed[key] = None
        if read_data:
            try:
                read[key] = store.read_into(key, _DiscardSink())  # type: ignore[arg-type]
            except ObjectMissing:
                read[key] = None
    how = "listing" + (", HEAD" if headed else "") + (", full read with sha256" if read_data else "")
    checked = [f"archive {base}/{item['key']} ({how})" for item in objects]
    return checked, archive_findings(job, objects, listed, headed, read, base, invocation)


def _git_blob_sha1(path: Path) -> str:
    from rlkeep.hub.trees import git_blob_sha1_file

    return git_blob_sha1_file(path)


def _hub_repo(repo_id: str, repo_type: str, commit: str | None, expected: dict[str, dict[str, Any]],
              local_copies: Mapping[str, Path], destination: str, repair: str, step: str,
              scratch: Path) -> tuple[str, list[Finding], dict[str, Path]]:
    """(main's head, findings on history and files, the files read back) of one Hub repo."""
    from huggingface_hub.hf_api import RepoFile

    from rlkeep.hub.client import resolve_target
    from rlkeep.hub.failures import hub_step

    target = resolve_target()
    api = target.api()
    with hub_step(target, repo_type, repo_id, "repo info"):
        head = api.repo_info(repo_id, repo_type=repo_type, revision="main").sha or ""
    history = None
    if commit and commit != head:
        with hub_step(target, repo_type, repo_id, "commit history"):
            history = [entry.commit_id for entry in api.list_repo_commits(repo_id, repo_type=repo_type, revision=head)]
    findings = history_finding(destination, repo_id, commit, head, history, repair, step)
    with hub_step(target, repo_type, repo_id, "tree listing"):
        remote = {entry.path: RemoteFile(entry.size, entry.lfs.sha256 if entry.lfs else None, entry.blob_id)
                  for entry in api.list_repo_tree(repo_id, repo_type=repo_type, revision=head, recursive=True)
                  if isinstance(entry, RepoFile)}
    read_back: dict[str, Path] = {}

    def blob_of(path: str) -> str | None:
        local = local_copies.get(path)
        if local is not None and local.is_file() and _sha256(local) == expected[path].get("sha256"):
            return _git_blob_sha1(local)
        return None

    def sha_of(path: str) -> str | None:
        with hub_step(target, repo_type, repo_id, f"download of {path}"):
            got = Path(api.hf_hub_download(repo_id, path, repo_type=repo_type, revision=head,
                                           local_dir=scratch / repo_type))
        read_back[path] = got
        return _sha256(got)

    findings += repo_file_findings(destination, repo_id, expected, remote, blob_of, sha_of, repair, step)
    return head, findings, read_back


def _read_hub_file(repo_id: str, repo_type: str, path: str, revision: str, scratch: Path) -> Path | None:
    """One file of a repo at `revision` read back into scratch; None when main has no such file."""
    from huggingface_hub.errors import EntryNotFoundError

    from rlkeep.hub.client import resolve_target
    from rlkeep.hub.failures import hub_step

    target = resolve_target()
    try:
        with hub_step(target, repo_type, repo_id, f"download of {path}"):
            return Path(target.api().hf_hub_download(repo_id, path, repo_type=repo_type, revision=revision,
                                                     local_dir=scratch / f"{repo_type}-{revision[:12]}"))
    except EntryNotFoundError:
        return None


def audit_model(job_dir: Path, done: Mapping[str, Any], invocation: str, scratch: Path) -> tuple[list[str], list[Finding]]:
    job = job_dir.name
    destinations = done.get("destinations") if isinstance(done.get("destinations"), dict) else {}
    verified = _sentinel(job_dir, "verify/model.json")
    repo_id = destinations.get("model")
    if not repo_id or verified.get("status") != "completed":
        return [], []
    expected = {str(f["path"]): f for f in verified.get("files") or [] if isinstance(f, dict)}
    stage = job_dir / "stage" / "model"
    copies = {path: stage / path for path in expected}
    if verified.get("card"):
        copies[CARD] = job_dir / str(verified["card"])
    head, findings, read_back = _hub_repo(repo_id, "model", destinations.get("model_commit"), expected, copies,
                                          "model", rerun_command(job, "publish_model", invocation), "publish_model",
                                          scratch)
    # the card is repaired by committing the kept linked card again (one commit, README.md only)
    card_subject = f"{repo_id}/{CARD}"
    relink = rerun_command(job, "link_model_card", invocation)
    card_findings = [Finding(f.destination, f.subject, f.problem, relink, "link_model_card")
                     for f in findings if f.subject == card_subject]
    findings = [f for f in findings if f.subject != card_subject]
    dataset = destinations.get("traces")
    checked = [f"model {repo_id}: main {head[:12]} holds DONE's commit {str(destinations.get('model_commit'))[:12]}; "
               f"{len(expected)} files by size and sha256 (LFS) or git blob id"]
    if dataset and CARD in expected:
        checked.append(f"model {card_subject}: '{TRACES_HEADING}' links {dataset}")
        if not card_findings:
            card_path: Path | None = copies[CARD]  # main's card has the kept card's blob id
        else:
            card_path = read_back.get(CARD) or _read_hub_file(repo_id, "model", CARD, head, scratch)
        text = card_path.read_text(encoding="utf-8", errors="replace") if card_path is not None else None
        link = card_link_findings(repo_id, text, dataset, relink)
        card_findings = link or card_findings  # a lost link says more than "the card changed"
    return checked, findings + card_findings


def audit_traces(job_dir: Path, done: Mapping[str, Any], invocation: str, scratch: Path) -> tuple[list[str], list[Finding]]:
    job = job_dir.name
    destinations = done.get("destinations") if isinstance(done.get("destinations"), dict) else {}
    verified = _sentinel(job_dir, "verify/traces.json")
    repo_id = destinations.get("traces")
    if not repo_id or verified.get("status") != "completed":
        return [], []
    stage = job_dir / "stage" / "traces"
    expected: dict[str, dict[str, Any]] = {str(s["path"]): s for s in verified.get("shards") or []}
    manifest = verified.get("manifest") or {}
    manifest_path = str(manifest.get("path") or TRACE_MANIFEST)
    if manifest.get("sha256"):
        staged = stage / manifest_path
        expected[manifest_path] = {"sha256": manifest["sha256"],
                                   "size": staged.stat().st_size if staged.is_file() else None}
    copies = {path: stage / path for path in expected}
    repair = rerun_command(job, "publish_traces", invocation)
    head, findings, _ = _hub_repo(repo_id, "dataset", destinations.get("traces_commit"), expected, copies, "traces",
                                  repair, "publish_traces", scratch)
    # the verified content is the shard set and the manifest: the dataset card and .gitattributes
    # are checked by publish_traces on each publication
    findings = [f for f in findings if f.subject.startswith(f"{repo_id}@") or
                f.subject.split(f"{repo_id}/", 1)[-1].startswith("data/") or f.subject == f"{repo_id}/{manifest_path}"]
    checked = [f"traces {repo_id}: main {head[:12]} holds DONE's commit {str(destinations.get('traces_commit'))[:12]}; "
               f"{len(verified.get('shards') or [])} shard(s) by size and sha256, and {manifest_path}"]
    return checked, findings


def audit_registry(job_dir: Path, done: Mapping[str, Any], record_url: str | None,
                   invocation: str) -> tuple[list[str], list[Finding]]:
    from rlkeep.registry import parse_registry_url, registered_model

    registration = done.get("registration")
    if not isinstance(registration, dict) or registration.get("status") != "completed":
        return [], []
    url = record_url or str(registration.get("url"))
    safe = parse_registry_url(url).safe
    row = registered_model(url, str(registration.get("model")))
    return ([f"registry {safe}: model {registration.get('model')} row"],
            registry_findings(job_dir.name, registration, row, safe, invocation))


def audit_job(job_dir: Path, *, read_data: bool = False, invocation: str = DEFAULT_INVOCATION,
              record_url: str | None = None) -> dict[str, Any]:
    """Audit one finished job and write `<job>/verify/audit.json`; returns what it holds."""
    import tempfile

    job_dir = Path(job_dir)
    done = read_json(job_dir / "DONE")
    if not isinstance(done, dict):
        raise RlkeepError(f"{job_dir / 'DONE'}: not a JSON object")
    checked, findings = local_findings(job_dir, done, invocation=invocation, hash_files=read_data)
    unreached: list[dict[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="rlkeep-audit-") as scratch:
        parts: list[tuple[str, Callable[[], tuple[list[str], list[Finding]]]]] = [
            ("archive", lambda: audit_archive(job_dir.name, _sentinel(job_dir, "verify/archive.json"), read_data,
                                              invocation)),
            ("model", lambda: audit_model(job_dir, done, invocation, Path(scratch))),
            ("traces", lambda: audit_traces(job_dir, done, invocation, Path(scratch))),
            ("registry", lambda: audit_registry(job_dir, done, record_url, invocation)),
        ]
        for name, part in parts:
            try:
                more_checked, more = part()
            except (RlkeepError, OSError) as error:
                unreached.append({"destination": name, "error": str(error).strip().splitlines()[0]})
                continue
            checked += more_checked
            findings += more
    result = {
        "job": job_dir.name,
        "audited_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "done_completed_at": done.get("completed_at"),
        "status": "drift" if findings else ("unchecked" if unreached else "ok"),
        "read_data": read_data,
        "checked": checked,
        "findings": [asdict(finding) for finding in findings],
        "unreached": unreached,
    }
    write_json(job_dir / AUDIT_FILE, result)
    return result


def last_audit(job_dir: Path) -> dict[str, Any] | None:
    """`<job>/verify/audit.json` as the pages summarise it, or None."""
    data = _sentinel(job_dir, AUDIT_FILE)
    if not data:
        return None
    return {"audited_at": data.get("audited_at"), "status": data.get("status"), "read_data": data.get("read_data"),
            "checked": len(data.get("checked") or []), "findings": data.get("findings") or [],
            "unreached": data.get("unreached") or []}


# --------------------------------------------------------------------------- the command


def finished_jobs(data_root: Path, names: list[str]) -> list[Path]:
    """The job folders to audit: those named (each must have DONE), else every one with DONE."""
    if names:
        missing = [name for name in names if not (data_root / name / "DONE").is_file()]
        if missing:
            raise RlkeepError(f"{', '.join(str(data_root / name / 'DONE') for name in missing)}: no completion record "
                              "to audit (a job is audited once DONE exists)")
        return [data_root / name for name in names]
    return sorted(path.parent for path in data_root.glob("*/DONE") if path.is_file())


def _record_url(data_root: Path, job: str) -> str | None:
    """The registry URL as the record has it (with its password, which DONE never holds)."""
    path = data_root / "records" / f"{job}.yaml"
    if not path.is_file():
        return None
    try:
        from rlkeep.records import load_record

        register = load_record(path).register or {}
    except RlkeepError:
        return None
    return register.get("url")


def cli_main(argv: list[str]) -> int:
    """`rlkeep audit [JOB...] [--data-root D] [--read-data[=FRACTION]] [--json]`: check again every
    destination each DONE names and what it lists as kept; exit 1 on drift, one line per finding
    with the command that repairs it. Reads only."""
    import argparse

    parser = argparse.ArgumentParser(prog="rlkeep audit", description=cli_main.__doc__)
    parser.add_argument("jobs", nargs="*", metavar="JOB", help="jobs to audit (default: every job with DONE)")
    parser.add_argument("--data-root", type=Path, default=Path("."), help="the data root (default: here)")
    parser.add_argument("--read-data", nargs="?", const=1.0, default=0.0, type=float, metavar="FRACTION",
                        help="read archives in full and compare sha256 (FRACTION: that share of the jobs, chosen "
                             "by job and day; default 1 when given)")
    parser.add_argument("--json", action="store_true", help="print every job's audit as JSON on stdout")
    parser.add_argument("--invocation", default=DEFAULT_INVOCATION,
                        help="the Snakemake command repairs start with (default: %(default)s)")
    args = parser.parse_args(argv)
    if not 0 <= args.read_data <= 1:
        parser.error(f"--read-data={args.read_data}: expected a fraction between 0 and 1")
    jobs = finished_jobs(args.data_root, args.jobs)
    if not jobs:
        print(f"rlkeep audit: no job under {args.data_root} has DONE; nothing to audit", file=sys.stderr)
        return 0
    day = time.strftime("%Y-%m-%d", time.gmtime())
    results = []
    for index, job_dir in enumerate(jobs, 1):
        read_data = read_data_chosen(job_dir.name, args.read_data, day)
        result = audit_job(job_dir, read_data=read_data, invocation=args.invocation,
                           record_url=_record_url(args.data_root, job_dir.name))
        results.append(result)
        counts = f"{len(result['checked'])} checks, {len(result['findings'])} finding(s)" + (
            f", {len(result['unreached'])} destination(s) not reached" if result["unreached"] else "")
        print(f"audit [{index}/{len(jobs)}] {job_dir.name}: {result['status']} ({counts})", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for result in results:
            for finding in result["findings"]:
                print(Finding(**finding).line(result["job"]))
            for entry in result["unreached"]:
                print(f"{result['job']}: {entry['destination']} not checked: {entry['error']}")
    return 1 if any(result["status"] != "ok" for result in results) else 0
