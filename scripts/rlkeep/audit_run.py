"""Running `rlkeep audit`: ask each destination a finished job's DONE names what it holds now, hold
the answers to what the verify sentinels recorded (rlkeep.audit's pure checks), write
`<job>/verify/audit.json`, and the command itself.

Reads only. The requests are bounded per job: the archive's listing, a HEAD per object and, with
--read-data, one full read each; per Hub repo its info, the commit history when main moved, the
tree listing, and a read of a regular file only when no local copy with the recorded sha256 gives
its git blob id; one SELECT on a read-only registry connection. A destination that cannot be
reached is named in `unreached` (the audit did not prove it), never taken as drift.
"""
from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rlkeep.audit import (AUDIT_FILE, CARD, DEFAULT_INVOCATION, TRACES_HEADING, TRACE_MANIFEST, Finding, RemoteFile,
                          archive_findings, card_link_findings, history_finding, local_findings, read_data_chosen,
                          registry_findings, repo_file_findings, rerun_command, sentinel)
from rlkeep.errors import RlkeepError
from rlkeep.hashing import sha256_file
from rlkeep.jsonio import read_json, write_json
from rlkeep.profiles import default_invocation
from rlkeep.readable import plural
from rlkeep.urls import join_url


def audit_archive(job: str, verified: Mapping[str, Any], read_data: bool, invocation: str) -> tuple[list[str], list[Finding]]:
    from rlkeep.archive.upload import DiscardSink
    from rlkeep.storage import ObjectMissing, S3Store, open_store

    if not verified:
        return ["archive: not checked: verify/archive.json, which records what was uploaded, is missing (a local "
                "finding names the command that brings it back)"], []
    remote = verified.get("remote")
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
                read[key] = store.read_into(key, DiscardSink())  # type: ignore[arg-type]
            except ObjectMissing:
                read[key] = None
    how = "listing" + (", HEAD" if headed else "") + (", full read with sha256" if read_data else "")
    checked = [f"archive {join_url(base, str(item['key']))} ({how})" for item in objects]
    return checked, archive_findings(job, objects, listed, headed, read, base, invocation)


def _hub_repo(repo_id: str, repo_type: str, commit: str | None, expected: dict[str, dict[str, Any]],
              local_copies: Mapping[str, Path], destination: str, repair: str, step: str,
              scratch: Path) -> tuple[str, list[Finding], dict[str, Path]]:
    """(main's head, findings on history and files, the files read back) of one Hub repo; a repo
    the Hub does not show is one finding (head "")."""
    from huggingface_hub.errors import RepositoryNotFoundError
    from huggingface_hub.hf_api import RepoFile

    from rlkeep.hub.client import resolve_target
    from rlkeep.hub.failures import hub_step
    from rlkeep.hub.trees import git_blob_sha1_file

    target = resolve_target()
    api = target.api()
    with hub_step(target, repo_type, repo_id, "repo info"):
        try:
            head = api.repo_info(repo_id, repo_type=repo_type, revision="main").sha or ""
        except RepositoryNotFoundError:
            head = ""
    if not head:
        return "", [Finding(destination, repo_id, f"no such {repo_type} repo at {target.endpoint} (or not visible "
                            "with this token)", repair, step)], {}
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
        if local is not None and local.is_file() and sha256_file(local) == expected[path].get("sha256"):
            return git_blob_sha1_file(local)
        return None

    def sha_of(path: str) -> str | None:
        with hub_step(target, repo_type, repo_id, f"download of {path}"):
            got = Path(api.hf_hub_download(repo_id, path, repo_type=repo_type, revision=head,
                                           local_dir=scratch / repo_type))
        read_back[path] = got
        return sha256_file(got)

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
    verified = sentinel(job_dir, "verify/model.json")
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
    if not head:
        return [f"model {repo_id}: repo on the Hub"], findings
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
        card_path = read_back.get(CARD)
        if card_path is None:  # not read back: main's card has the kept card's blob id, unless it changed
            card_path = copies[CARD] if not card_findings else _read_hub_file(repo_id, "model", CARD, head, scratch)
        text = card_path.read_text(encoding="utf-8", errors="replace") if card_path is not None else None
        link = card_link_findings(repo_id, text, dataset, relink)
        card_findings = link or card_findings  # a lost link says more than "the card changed"
    return checked, findings + card_findings


def audit_traces(job_dir: Path, done: Mapping[str, Any], invocation: str, scratch: Path) -> tuple[list[str], list[Finding]]:
    job = job_dir.name
    destinations = done.get("destinations") if isinstance(done.get("destinations"), dict) else {}
    verified = sentinel(job_dir, "verify/traces.json")
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
    if not head:
        return [f"traces {repo_id}: repo on the Hub"], findings
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
            ("archive", lambda: audit_archive(job_dir.name, sentinel(job_dir, "verify/archive.json"), read_data,
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
    parser.add_argument("--invocation", default=None,
                        help="the Snakemake command repairs start with (default: this checkout's iris profile)")
    args = parser.parse_args(argv)
    args.invocation = args.invocation or default_invocation()
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
        counts = f"{plural(len(result['checked']), 'check')}, {plural(len(result['findings']), 'finding')}" + (
            f", {plural(len(result['unreached']), 'destination')} not reached" if result["unreached"] else "")
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
