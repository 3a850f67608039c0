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

The checks here are pure functions of the recorded facts and what a destination answered
(`*_findings`), and the local checks STATUS.json also runs; rlkeep.audit_run asks the destinations,
writes `<job>/verify/audit.json` and is the command.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlkeep.hashing import sha256_file
from rlkeep.jsonio import read_json
from rlkeep.pipeline import STEP_BY_NAME, STEPS
from rlkeep.urls import join_url

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
        return text + (f"; repair: {self.repair}" if self.repair else "; no command repairs it")


def rerun_command(job: str, step: str, invocation: str = DEFAULT_INVOCATION) -> str:
    """Rerun `step` (its sentinel is present, so forced) and what follows it up to DONE: the
    destination is written again from what the job folder keeps (archive, staging, register)."""
    return f"{invocation} {job}/DONE --forcerun {step}"  # --forcerun takes every word after it: target first


def rebuild_command(job: str, target: str, invocation: str = DEFAULT_INVOCATION, *, force: str | None = None) -> str:
    """Rebuild one local file or folder by naming it: Snakemake makes a missing target again;
    `force` names the rule when the target is present but changed."""
    return f"{invocation} {job}/{target}" + (f" --forcerun {force}" if force else "")


# --------------------------------------------------------------------------- local (pure, no network)


def sentinel(job_dir: Path, relpath: str) -> dict[str, Any]:
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
            elif hash_files and sha256_file(path) != entry.get("sha256"):
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
    archived = sentinel(job_dir, "verify/archive.json").get("local")
    if isinstance(archived, dict) and steps.get("archive") == "completed":
        tgz = job_dir / "archive" / f"{job}_archive.tgz"
        checked.append(f"local archive/{tgz.name}")
        if not tgz.is_file():
            problem = "missing"
        elif tgz.stat().st_size != archived.get("tgz_bytes"):
            problem = f"{tgz.stat().st_size} bytes, verify/archive.json says {archived.get('tgz_bytes')}"
        elif hash_files and sha256_file(tgz) != archived.get("sha256"):
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
        url = join_url(base, key)
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
    for path, want in expected.items():  # in the sentinel's order (sorted when written)
        got = remote.get(path)
        if got is None:
            continue
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


def last_audit(job_dir: Path) -> dict[str, Any] | None:
    """`<job>/verify/audit.json` as the pages summarise it, or None."""
    data = sentinel(job_dir, AUDIT_FILE)
    if not data:
        return None
    return {"audited_at": data.get("audited_at"), "status": data.get("status"), "read_data": data.get("read_data"),
            "checked": len(data.get("checked") or []), "findings": data.get("findings") or [],
            "unreached": data.get("unreached") or []}
