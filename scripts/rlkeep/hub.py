"""Publication to a Hugging Face Hub: the model (additive), the trace dataset (one replacing
commit), and the checks that a fresh download of each is what was staged.

The endpoint and token come from HF_ENDPOINT and HF_TOKEN (docs/reference.md, contract §2) unless passed
explicitly. The token never appears in a message, an exception or returned evidence; without
HF_TOKEN no token is sent at all (a token saved for huggingface.co is never offered to another
endpoint).

Xet is switched off for every call (`huggingface_hub.constants.HF_HUB_DISABLE_XET = True`, and
HF_HUB_DISABLE_XET=1 for child processes): uploads then take the plain LFS protocol, which both the
Hub and the local test server (rlkeep_dev.devserver.hub) accept, and `upload_folder` makes one commit.

Staging trees are published as they are except hidden paths (any component starting with '.'):
Snakemake's `.snakemake_timestamp`, `.cache/` folders and half-written temp files stay local.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi
from huggingface_hub import constants as hf_constants
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.hf_api import RepoFile

from rlkeep.diskspace import is_no_space
from rlkeep.errors import RlkeepError
from rlkeep.hashing import sha256_file
from rlkeep.files import link_or_copy
from rlkeep.jsonio import atomic_write_bytes, read_json, write_json
from rlkeep.redaction import redact_tree, redactor_from_environment
from rlkeep.steps import StepContext, check_transfer, not_applicable
from rlkeep.tokenizer import TOKENIZER_REQUIREMENT, has_tokenizer
from rlkeep.waits import seconds_from_env

DEFAULT_ENDPOINT = "https://huggingface.co"
PUBLIC_HUB = "https://huggingface.co"
ALLOWED_REMOTE_EXTRAS = frozenset({".gitattributes"})  # the Hub creates it with every repo
CLIENT_BOOKKEEPING = ".cache/huggingface"  # written by snapshot_download(local_dir=...)
UPLOAD_IGNORE_PATTERNS = [".*", "*/.*"]  # fnmatch '*' spans '/': any hidden path component
TRACES_HEADING = "## Training Traces"
CARD_NAME = "README.md"
MANIFEST_NAME = "trace_export_manifest.json"
TRAIN_SHARD_RE = re.compile(r"^data/train-[^/]*\.parquet$")
DATA_SHARD_RE = re.compile(r"^data/[^/]+\.parquet$")
REPO_ID_RE = re.compile(  # a Hub repo id, org/name: the one pattern rlkeep checks them with
    r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
HUB_FAILURES = (OSError, ValueError, RuntimeError, httpx2.HTTPError)
RATE_LIMIT_WAIT_ENV = "RLKEEP_HUB_RATE_LIMIT_WAIT"
DEFAULT_RATE_LIMIT_WAIT = 300.0  # seconds one request may spend waiting out 429 answers


def disable_xet() -> None:
    """Route uploads through LFS: the constant is read per call, the variable by child processes."""
    hf_constants.HF_HUB_DISABLE_XET = True
    os.environ["HF_HUB_DISABLE_XET"] = "1"


disable_xet()


# ---------------------------------------------------------------------------------------------
# Rate limits (HTTP 429)


class HubRateLimited(RlkeepError):
    """The Hub kept answering 429 for longer than the bound allows."""


def rate_limit_bound() -> float:
    """Seconds one request may spend waiting out 429 answers (RLKEEP_HUB_RATE_LIMIT_WAIT)."""
    return seconds_from_env(RATE_LIMIT_WAIT_ENV, DEFAULT_RATE_LIMIT_WAIT)

def _replayable(request: httpx2.Request) -> bool:
    """A body held in memory (JSON, a commit's lines) can be sent again; a file being streamed cannot."""
    return isinstance(request.stream, httpx2.ByteStream)


class RateLimitTransport(httpx2.BaseTransport):
    """Honours 429 + Retry-After (delay seconds or an HTTP date; backoff without one) for every Hub
    request whose body can be sent again, within a bounded total wait per request.

    huggingface_hub retries some calls on 429 by itself, sleeping whatever Retry-After says, and
    others (the commit) not at all: waiting here gives every call the same, bounded, behaviour. A
    streamed body (an LFS PUT of a file) goes back to the client's own retry while the bound holds.
    """

    def __init__(self, inner: httpx2.BaseTransport) -> None:
        self.inner = inner

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        from rlkeep.storage import retry_after_seconds

        waited, answers = 0.0, 0
        while True:
            response = self.inner.handle_request(request)
            if response.status_code != 429:
                return response
            answers += 1
            retry_after = retry_after_seconds(response.headers.get("Retry-After"))
            pause = retry_after if retry_after is not None else min(30.0, 2.0 ** (answers - 1))
            bound = rate_limit_bound()
            if waited + pause > bound:
                response.close()
                path = request.url.path
                asked = f"asks to wait {pause:g} s more" if retry_after is not None else "still answers 429"
                raise HubRateLimited(
                    f"rate limited: HTTP 429 on {request.method} {path} ({hub_call_of(request.method, path)}); the Hub "
                    f"{asked} after {answers} such answers and {waited:.0f} s of waiting, past the {bound:g} s allowed "
                    f"({RATE_LIMIT_WAIT_ENV}): rerun later, or raise the bound")
            if not _replayable(request):
                return response
            response.read()
            response.close()
            time.sleep(pause)
            waited += pause

    def close(self) -> None:
        self.inner.close()


def _client_with_rate_limits() -> httpx2.Client:
    """huggingface_hub's default client (its request hooks, no timeout, redirects) over RateLimitTransport."""
    from huggingface_hub.utils._http import default_client_factory

    default = default_client_factory()
    hooks = default.event_hooks
    default.close()
    return httpx2.Client(event_hooks=hooks, follow_redirects=True, timeout=None,
                         transport=RateLimitTransport(httpx2.HTTPTransport()))


_rate_limits_installed = False


def install_rate_limit_handling() -> None:
    """Every huggingface_hub request of this process goes through RateLimitTransport (once)."""
    global _rate_limits_installed
    if not _rate_limits_installed:
        from huggingface_hub import set_client_factory

        set_client_factory(_client_with_rate_limits)
        _rate_limits_installed = True


# ---------------------------------------------------------------------------------------------
# Where to publish


@dataclass(frozen=True)
class HubTarget:
    endpoint: str
    token: str | None = field(default=None, repr=False)

    def api(self) -> HfApi:
        disable_xet()
        install_rate_limit_handling()
        # token=False: never fall back to a token file saved for another Hub.
        return HfApi(endpoint=self.endpoint, token=self.token if self.token else False)

    def scrub(self, text: str) -> str:
        """Defence in depth: no message built here should contain the token, but make sure."""
        if self.token and len(self.token) >= 8:  # shorter strings are not secrets, just noise to mask
            return text.replace(self.token, "<HF_TOKEN>")
        return text


def resolve_target(endpoint: str | None = None, token: str | None = None) -> HubTarget:
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    token = token if token is not None else os.environ.get("HF_TOKEN") or None
    return HubTarget(endpoint.rstrip("/"), token)


def check_repo_id(repo_id: str) -> None:
    if not REPO_ID_RE.fullmatch(repo_id or ""):
        raise RlkeepError(f"invalid Hub repo id {repo_id!r}: expected <namespace>/<name>")


# ---------------------------------------------------------------------------------------------
# Local trees


@dataclass(frozen=True)
class FileDigest:
    size: int
    sha256: str


def is_published_path(relpath: str) -> bool:
    """False for hidden paths (a component starting with '.'): never uploaded from staging."""
    return not any(part.startswith(".") for part in relpath.split("/"))


def git_blob_sha1_file(path: Path) -> str:
    digest = hashlib.sha1(b"blob " + str(path.stat().st_size).encode() + b"\0")
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def staged_files(stage_dir: Path) -> dict[str, Path]:
    """The files a publication of `stage_dir` uploads: relative posix path -> local path."""
    return {
        path.relative_to(stage_dir).as_posix(): path
        for path in sorted(stage_dir.rglob("*"))
        if path.is_file() and is_published_path(path.relative_to(stage_dir).as_posix())
    }


def downloaded_files(download_dir: Path) -> dict[str, Path]:
    """Every file of a downloaded repo, hidden ones included, minus the client's bookkeeping."""
    return {
        rel: path
        for path in sorted(download_dir.rglob("*"))
        if path.is_file()
        and not (rel := path.relative_to(download_dir).as_posix()).startswith(CLIENT_BOOKKEEPING + "/")
    }


def digest_files(files: dict[str, Path]) -> dict[str, FileDigest]:
    return {rel: FileDigest(path.stat().st_size, sha256_file(path)) for rel, path in files.items()}


def tree_differences(stage: dict[str, FileDigest], remote: dict[str, FileDigest],
                     allowed_extras: frozenset[str] = ALLOWED_REMOTE_EXTRAS) -> list[str]:
    """Problems between a staged tree and a downloaded one, one line per file."""
    problems = [f"{rel}: in staging but missing from the Hub" for rel in sorted(stage.keys() - remote.keys())]
    problems += [f"{rel}: on the Hub but not in staging"
                 for rel in sorted(remote.keys() - stage.keys() - allowed_extras)]
    for rel in sorted(stage.keys() & remote.keys()):
        local, hub = stage[rel], remote[rel]
        if local.size != hub.size:
            problems.append(f"{rel}: size differs (staging {local.size} bytes, Hub {hub.size} bytes)")
        elif local.sha256 != hub.sha256:
            problems.append(f"{rel}: content differs (sha256 staging {local.sha256}, Hub {hub.sha256})")
    return problems


def compare_trees(stage_dir: Path, download_dir: Path) -> list[str]:
    """Missing, extra (beyond ALLOWED_REMOTE_EXTRAS), size- or sha256-mismatched files."""
    return tree_differences(digest_files(staged_files(Path(stage_dir))),
                            digest_files(downloaded_files(Path(download_dir))))


def remote_extras(stage_dir: Path, download_dir: Path) -> list[str]:
    """Allowed files the Hub holds beyond staging (e.g. `.gitattributes`)."""
    extra = downloaded_files(Path(download_dir)).keys() - staged_files(Path(stage_dir)).keys()
    return sorted(extra & ALLOWED_REMOTE_EXTRAS)


# ---------------------------------------------------------------------------------------------
# Publication checks (docs/reference.md, contract §7)


def markdown_section(text: str, heading: str) -> str | None:
    """Body of the first `heading` line outside code fences, up to the next heading of level <= 2."""
    level = len(heading) - len(heading.lstrip("#"))
    lines, body, inside, fenced = text.splitlines(), [], False, False
    for line in lines:
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        if not fenced and inside and re.match(rf"^#{{1,{level}}}\s", line):
            break
        if inside:
            body.append(line)
        elif not fenced and line.rstrip().rstrip("#").rstrip() == heading:
            inside = True
    return "\n".join(body) if inside else None


def dataset_links(text: str, endpoint: str | None) -> list[str]:
    """`<namespace>/<name>` of every Hub dataset URL in text (huggingface.co or `endpoint`)."""
    bases = {PUBLIC_HUB}
    if endpoint:
        bases.add(endpoint.rstrip("/"))
    found = []
    for base in sorted(bases):
        pattern = re.escape(base) + r"/datasets/([A-Za-z0-9][A-Za-z0-9._-]*)/([A-Za-z0-9][A-Za-z0-9._-]*)"
        for match in re.finditer(pattern, text):
            found.append(f"{match.group(1)}/{match.group(2).rstrip('.')}")
    return found


def check_publication(model_dir: Path, *, endpoint: str | None = None,
                      expected_dataset: str | None = None, pending_traces_link: bool = False) -> list[str]:
    """Problems that keep `model_dir` (a downloaded model repo) from being a complete publication.

    endpoint: a Hub whose /datasets/ URLs also count as dataset links (default $HF_ENDPOINT).
    expected_dataset: when given, the Training Traces link must name this dataset.
    pending_traces_link: every check but the link, for a model published before its trace dataset
    was verified: the card's Training Traces section must exist and link no dataset yet.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        return [f"{model_dir}: not a directory"]
    endpoint = endpoint if endpoint is not None else os.environ.get("HF_ENDPOINT")
    problems = _weight_problems(model_dir)
    problems += _config_problems(model_dir)
    if not has_tokenizer({path.name for path in model_dir.iterdir() if path.is_file()}):
        problems.append(f"{model_dir}: no tokenizer file (expected {TOKENIZER_REQUIREMENT})")
    logs = model_dir / "training_logs"
    if not logs.is_dir():
        problems.append("training_logs/: missing (trainer logs and metrics must be published with the model)")
    elif not any(path.is_file() and path.stat().st_size > 0 for path in logs.rglob("*")):
        problems.append("training_logs/: empty (no non-empty file)")
    problems += _card_problems(model_dir, endpoint, expected_dataset, pending_traces_link)
    return problems


def _weight_problems(model_dir: Path) -> list[str]:
    weights = sorted(path for path in model_dir.glob("*.safetensors") if path.is_file())
    if not weights:
        return [f"{model_dir}: no top-level *.safetensors weights file"]
    problems = [f"{path.name}: empty weights file" for path in weights if path.stat().st_size == 0]
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            return problems + [f"{index.name}: unreadable weight_map ({type(error).__name__})"]
        problems += [f"{index.name}: references missing shard {shard}" for shard in sorted(shards)
                     if not (model_dir / shard).is_file()]
    return problems


def _config_problems(model_dir: Path) -> list[str]:
    config = model_dir / "config.json"
    if not config.is_file():
        return ["config.json: missing (model configuration)"]
    try:
        if not isinstance(json.loads(config.read_text(encoding="utf-8")), dict):
            return ["config.json: not a JSON object"]
    except ValueError as error:
        return [f"config.json: not valid JSON ({error})"]
    return []


def _card_problems(model_dir: Path, endpoint: str | None, expected_dataset: str | None,
                   pending_traces_link: bool = False) -> list[str]:
    card = model_dir / "README.md"
    if not card.is_file():
        return ["README.md: missing (model card with a '## Training Traces' section)"]
    section = markdown_section(card.read_text(encoding="utf-8", errors="replace"), TRACES_HEADING)
    if section is None:
        return [f"README.md: no '{TRACES_HEADING}' section"]
    links = dataset_links(section, endpoint)
    if pending_traces_link:
        return [f"README.md: the '{TRACES_HEADING}' section links {', '.join(links)} before the trace dataset "
                "is verified (the link is added once verify/traces.json exists)"] if links else []
    if not links:
        return [f"README.md: the '{TRACES_HEADING}' section links no Hugging Face dataset "
                f"(expected {PUBLIC_HUB}/datasets/<namespace>/<name>)"]
    if expected_dataset and expected_dataset not in links:
        return [f"README.md: the '{TRACES_HEADING}' section links {', '.join(links)}, "
                f"not the trace dataset {expected_dataset}"]
    return []


def check_publication_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlkeep check-publication",
                                     description="Check that a downloaded model repo is a complete publication.")
    parser.add_argument("dir", type=Path, help="the downloaded model repo")
    parser.add_argument("--endpoint", default=None, help="Hub whose /datasets/ links count (default $HF_ENDPOINT)")
    parser.add_argument("--dataset", default=None, help="the trace dataset the card must link (namespace/name)")
    parser.add_argument("--pending-traces-link", action="store_true",
                        help="every check but the link: the card's Training Traces section must exist and link no "
                             "dataset yet (a model published before its trace dataset was verified)")
    args = parser.parse_args(argv)
    if args.pending_traces_link and args.dataset:
        parser.error("--dataset names the link that --pending-traces-link says is not there yet; pass one of them")
    problems = check_publication(args.dir, endpoint=args.endpoint, expected_dataset=args.dataset,
                                 pending_traces_link=args.pending_traces_link)
    for problem in problems:
        print(f"problem: {problem}")
    if problems:
        print(f"{args.dir}: {len(problems)} problem(s); not a complete model publication")
        return 1
    if args.pending_traces_link:
        print(f"{args.dir}: model publication complete but for the Training Traces link, which is pending "
              "(weights, config, tokenizer, training_logs/, Training Traces section)")
        return 0
    print(f"{args.dir}: complete model publication (weights, config, tokenizer, training_logs/, Training Traces link)")
    return 0


# ---------------------------------------------------------------------------------------------
# Hub calls and their failures


def _innermost_http_error(error: BaseException) -> HfHubHTTPError | None:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, HfHubHTTPError) and getattr(current, "response", None) is not None:
            return current
        current = current.__cause__ or current.__context__
    return None


def hub_call_of(method: str, path: str) -> str:
    """The protocol step a request belongs to, named for an operator."""
    steps = [("/preupload/", "preupload"), ("/info/lfs/objects/batch", "LFS batch"), ("/verify", "LFS verify"),
             ("/complete", "LFS multipart completion"), ("/commit/", "commit"), ("/validate-yaml", "README validation"),
             ("/resolve/", "file download"), ("/tree/", "tree listing"), ("/paths-info/", "paths info"),
             ("/repos/create", "repo creation"), ("/xet-", "Xet token (Xet must be disabled)")]
    for marker, name in steps:
        if marker in path:
            return name
    if method == "PUT":
        return "LFS upload"
    if path.startswith("/api/"):
        return "repo info"
    return "request"


def describe_hub_error(error: BaseException) -> str:
    """One line about what failed, without query strings (LFS upload URLs carry signatures)."""
    http_error = _innermost_http_error(error)
    if http_error is None:
        return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}".rstrip(": ")
    response = http_error.response
    request = response.request
    path = request.url.path
    server = response.headers.get("X-Error-Message") or http_error.server_message or ""
    detail = f"HTTP {response.status_code} on {request.method} {path} ({hub_call_of(request.method, path)})"
    return f"{detail}: {server.strip()}" if server.strip() else detail


@contextmanager
def hub_step(target: HubTarget, repo_type: str, repo_id: str, step: str, note: str = "") -> Iterator[None]:
    """Turn a Hub or network failure into an RlkeepError naming the repo and the step."""
    try:
        yield
    except HubRateLimited as error:
        raise RlkeepError(target.scrub(f"Hub {step} failed for {repo_type} repo {repo_id} at {target.endpoint}: "
                                       f"{error}")) from None
    except RlkeepError:
        raise
    except HUB_FAILURES as error:
        limited = _rate_limited_cause(error)
        if limited is not None:  # raised inside the client's worker threads, wrapped there
            raise RlkeepError(target.scrub(f"Hub {step} failed for {repo_type} repo {repo_id} at {target.endpoint}: "
                                           f"{limited}")) from None
        full = _local_disk_full(error)
        if full is not None:
            raise full from None  # our disk, not the Hub: the step says which path is full (steps.run_step)
        message = f"Hub {step} failed for {repo_type} repo {repo_id} at {target.endpoint}: {describe_hub_error(error)}"
        if note:
            message += f". {note}"
        raise RlkeepError(target.scrub(message)) from None


def _rate_limited_cause(error: BaseException | None) -> HubRateLimited | None:
    seen = 0
    while error is not None and seen < 16:
        if isinstance(error, HubRateLimited):
            return error
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def _local_disk_full(error: BaseException | None) -> OSError | None:
    """The ENOSPC/EDQUOT error in an exception chain (a download ran out of local space), if any."""

    seen = 0
    while error is not None and seen < 16:
        if is_no_space(error):
            return error  # type: ignore[return-value]
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def _status(error: BaseException) -> int | None:
    http_error = _innermost_http_error(error)
    return http_error.response.status_code if http_error is not None else None


def ensure_repo(api: HfApi, target: HubTarget, repo_id: str, repo_type: str, private: bool) -> tuple[bool, bool]:
    """Create the repo when absent or reuse it; refuse a public repo for a private publication.

    Returns (created, private as the Hub reports it): a repo that is private although the
    record allows public stays private (the safer way round), and the evidence says so.
    """
    created = True
    with hub_step(target, repo_type, repo_id, "repo creation"):
        try:
            api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=False)
        except HfHubHTTPError as error:
            if _status(error) != 409:  # 409: it exists already, which is fine
                raise
            created = False
    with hub_step(target, repo_type, repo_id, "repo info"):
        info = api.repo_info(repo_id, repo_type=repo_type)
    if private and not info.private:
        raise RlkeepError(f"{repo_type} repo {repo_id} at {target.endpoint} exists and is public, but the record "
                          f"asks for a private publication; nothing was uploaded (make the repo private or change "
                          f"publish.private)")
    return created, bool(info.private)


def head_of(api: HfApi, target: HubTarget, repo_id: str, repo_type: str) -> str:
    with hub_step(target, repo_type, repo_id, "repo info"):
        sha = api.repo_info(repo_id, repo_type=repo_type, revision="main").sha
    if not sha:
        raise RlkeepError(f"{repo_type} repo {repo_id} at {target.endpoint}: repo info has no commit sha")
    return sha


def _require_dir(path: Path, what: str) -> None:
    if not path.is_dir():
        raise RlkeepError(f"{path}: {what} is not a directory")


# ---------------------------------------------------------------------------------------------
# Model


def publish_model(stage_dir: Path, repo_id: str, *, private: bool, endpoint: str | None = None,
                  token: str | None = None, commit_message: str) -> dict[str, Any]:
    """Upload the staged model tree additively (remote files absent from staging stay).

    Returns {"repo_id", "repo_type", "commit", "created", "private", "no_op", "files"}; no_op
    means the Hub already held every staged file and no commit was made.
    """
    stage_dir = Path(stage_dir)
    _require_dir(stage_dir, "model staging")
    check_repo_id(repo_id)
    files = staged_files(stage_dir)
    if not files:
        raise RlkeepError(f"{stage_dir}: model staging holds no file to publish")
    target = resolve_target(endpoint, token)
    api = target.api()
    created, is_private = ensure_repo(api, target, repo_id, "model", private)
    head = head_of(api, target, repo_id, "model")
    note = f"Staging {stage_dir} is untouched; rerunning resumes (uploaded objects are reused)"
    with hub_step(target, "model", repo_id, "upload", note):
        info = api.upload_folder(repo_id=repo_id, repo_type="model", folder_path=stage_dir,
                                 commit_message=commit_message, ignore_patterns=list(UPLOAD_IGNORE_PATTERNS),
                                 parent_commit=head)
    return {"repo_id": repo_id, "repo_type": "model", "commit": info.oid, "created": created,
            "private": is_private, "no_op": info.oid == head, "files": sorted(files)}


def publish_model_card(card: Path, repo_id: str, *, endpoint: str | None = None, token: str | None = None,
                       commit_message: str) -> dict[str, Any]:
    """Replace README.md of an existing model repo in one commit that touches no other file.

    Returns {"repo_id", "repo_type", "commit", "parent", "no_op", "files"}; no_op means main
    already held this card and no commit was made.
    """
    card = Path(card)
    check_repo_id(repo_id)
    if not card.is_file():
        raise RlkeepError(f"{card}: the model card to publish is missing")
    target = resolve_target(endpoint, token)
    api = target.api()
    head = head_of(api, target, repo_id, "model")
    operation = CommitOperationAdd(path_in_repo=CARD_NAME, path_or_fileobj=str(card))
    note = f"The card {card} is kept and the rest of the repo untouched; rerunning completes it"
    with hub_step(target, "model", repo_id, "model card commit", note):
        info = api.create_commit(repo_id, [operation], commit_message=commit_message, repo_type="model",
                                 parent_commit=head)
    return {"repo_id": repo_id, "repo_type": "model", "commit": info.oid, "parent": head,
            "no_op": info.oid == head, "files": [CARD_NAME]}


def download_fresh(repo_id: str, dest: Path, *, repo_type: str, revision: str, endpoint: str | None = None,
                   token: str | None = None) -> Path:
    """Download the repo at `revision` into `dest`, a new or empty directory; nothing is left on failure."""
    dest = Path(dest)
    check_repo_id(repo_id)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise RlkeepError(f"{dest}: a fresh download needs a new empty directory")
    target = resolve_target(endpoint, token)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with hub_step(target, repo_type, repo_id, f"download of {revision}"):
            target.api().snapshot_download(repo_id=repo_id, repo_type=repo_type, revision=revision, local_dir=dest)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    shutil.rmtree(dest / CLIENT_BOOKKEEPING, ignore_errors=True)
    if (dest / ".cache").is_dir() and not any((dest / ".cache").iterdir()):
        (dest / ".cache").rmdir()
    return dest


def _history_problems(api: HfApi, target: HubTarget, repo_id: str, repo_type: str, commit: str,
                      head: str) -> list[str]:
    if head == commit:
        return []
    with hub_step(target, repo_type, repo_id, "commit history"):
        history = [entry.commit_id for entry in api.list_repo_commits(repo_id, repo_type=repo_type, revision=head)]
    if commit not in history:
        return [f"published commit {commit} is not in the history of main (now {head})"]
    return []


def _finding_text(finding: Any) -> str:
    """Where a redaction finding is, never what it is."""
    kind = getattr(finding, "kind", None) or getattr(finding, "shape", "?")
    return f"{getattr(finding, 'path', '?')}:{getattr(finding, 'line', '?')} ({kind})"


def verify_model_publication(stage_dir: Path, repo_id: str, commit: str, work_dir: Path, *, redactor: Any,
                             endpoint: str | None = None, token: str | None = None,
                             traces_repo: str | None = None, pending_traces_link: bool = False,
                             card: Path | None = None) -> dict[str, Any]:
    """Fresh download of main into a new dir under `work_dir`, then: redaction check, publication
    checks, and the downloaded tree equals staging. Returns the evidence; raises RlkeepError
    listing every problem. Main having moved past `commit` is fine as long as its content still
    equals staging (a remote edit shows up as a content difference).

    pending_traces_link: check everything but the Training Traces link (which must not be there
    yet); card: the README.md that replaced staging's on the Hub (the card with the link).
    """

    stage_dir, work_dir = Path(stage_dir), Path(work_dir)
    _require_dir(stage_dir, "model staging")
    check_repo_id(repo_id)
    target = resolve_target(endpoint, token)
    api = target.api()
    head = head_of(api, target, repo_id, "model")
    problems = _history_problems(api, target, repo_id, "model", commit, head)
    work_dir.mkdir(parents=True, exist_ok=True)
    download_dir = Path(tempfile.mkdtemp(prefix=f"model-{head[:12]}-", dir=work_dir))
    download_fresh(repo_id, download_dir, repo_type="model", revision=head, endpoint=target.endpoint,
                   token=target.token)
    redaction = redact_tree(download_dir, redactor, check=True)
    findings = list(redaction.findings)
    if findings:
        shown = ", ".join(_finding_text(finding) for finding in findings[:20])
        problems.append(f"redaction check: {len(findings)} credential-shaped finding(s) in the download: {shown}")
    problems += check_publication(download_dir, endpoint=target.endpoint, expected_dataset=traces_repo,
                                  pending_traces_link=pending_traces_link)
    remote = digest_files(downloaded_files(download_dir))
    expected = staged_files(stage_dir)
    if card is not None:
        expected[CARD_NAME] = Path(card)
    problems += tree_differences(digest_files(expected), remote)
    if problems:
        raise RlkeepError(target.scrub(
            f"model repo {repo_id} at {target.endpoint} failed verification (main at {head}, published {commit}; "
            f"download in {download_dir}):\n" + "\n".join(f"  - {problem}" for problem in problems)))
    return {
        "status": "completed", "repo_id": repo_id, "repo_type": "model", "commit": commit, "verified_commit": head,
        "url": f"{target.endpoint}/{repo_id}", "download_dir": str(download_dir),
        "files": [{"path": rel, "size": d.size, "sha256": d.sha256} for rel, d in sorted(remote.items())],
        "remote_extras": sorted(remote.keys() & ALLOWED_REMOTE_EXTRAS), "redaction_findings": 0,
        "redaction_files_scanned": getattr(redaction, "files_scanned", None),
        "redaction_files_skipped": [list(item) for item in getattr(redaction, "files_skipped", [])],
        "publication_problems": 0,
        "checks": ["fresh download", "redaction check",
                   "check-publication --pending-traces-link" if pending_traces_link else "check-publication",
                   "download equals staging" + (" with the linked model card" if card is not None else "")],
    }


# ---------------------------------------------------------------------------------------------
# Trace dataset


def _staged_traces(stage_dir: Path) -> tuple[dict[str, Path], list[str]]:
    """(staged files, shard paths) after checking the staging holds exactly a trace export."""
    _require_dir(stage_dir, "trace staging")
    files = staged_files(stage_dir)
    if MANIFEST_NAME not in files:
        raise RlkeepError(f"{stage_dir / MANIFEST_NAME}: missing; the trace staging has no export manifest")
    shards = sorted(rel for rel in files if DATA_SHARD_RE.fullmatch(rel))
    if not any(TRAIN_SHARD_RE.fullmatch(rel) for rel in shards):
        raise RlkeepError(f"{stage_dir}: no data/train-*.parquet shard to publish")
    unexpected = sorted(files.keys() - set(shards) - {MANIFEST_NAME, CARD_NAME})
    if unexpected:
        raise RlkeepError(f"{stage_dir}: trace staging holds files that are not part of a trace export: "
                          f"{', '.join(unexpected)}")
    return files, shards


def replace_trace_shards(stage_dir: Path, repo_id: str, *, private: bool, endpoint: str | None = None,
                         token: str | None = None, commit_message: str) -> dict[str, Any]:
    """One commit: add the staged data/*.parquet and manifest, delete remote data/train-*.parquet
    shards absent from staging, nothing else. Identical content makes no commit (no_op).
    """
    stage_dir = Path(stage_dir)
    files, shards = _staged_traces(stage_dir)
    check_repo_id(repo_id)
    target = resolve_target(endpoint, token)
    api = target.api()
    created, is_private = ensure_repo(api, target, repo_id, "dataset", private)
    head = head_of(api, target, repo_id, "dataset")
    with hub_step(target, "dataset", repo_id, "file listing"):
        remote = api.list_repo_files(repo_id, repo_type="dataset", revision=head)
    stale = sorted(path for path in remote if TRAIN_SHARD_RE.fullmatch(path) and path not in files)
    uploads = shards + [name for name in (CARD_NAME,) if name in files] + [MANIFEST_NAME]
    operations: list[CommitOperationAdd | CommitOperationDelete] = [
        CommitOperationAdd(path_in_repo=rel, path_or_fileobj=str(files[rel])) for rel in uploads]
    operations += [CommitOperationDelete(path_in_repo=path, is_folder=False) for path in stale]
    note = f"Staging {stage_dir} is untouched and the remote shard set unchanged; rerunning completes it"
    with hub_step(target, "dataset", repo_id, "commit", note):
        info = api.create_commit(repo_id, operations, commit_message=commit_message, repo_type="dataset",
                                 parent_commit=head)
    return {"repo_id": repo_id, "repo_type": "dataset", "commit": info.oid, "created": created,
            "private": is_private, "no_op": info.oid == head, "uploaded": uploads, "deleted": stale}


def verify_trace_publication(stage_dir: Path, repo_id: str, commit: str, *, endpoint: str | None = None,
                             token: str | None = None) -> dict[str, Any]:
    """Main's data/train-*.parquet set equals staging's exactly, every staged shard matches in size
    and hash, and the remote manifest read back equals the staged one. Returns the evidence.
    """
    stage_dir = Path(stage_dir)
    files, shards = _staged_traces(stage_dir)
    check_repo_id(repo_id)
    target = resolve_target(endpoint, token)
    api = target.api()
    head = head_of(api, target, repo_id, "dataset")
    problems = _history_problems(api, target, repo_id, "dataset", commit, head)
    with hub_step(target, "dataset", repo_id, "tree listing"):
        remote = {entry.path: entry for entry in api.list_repo_tree(repo_id, repo_type="dataset", revision=head,
                                                                     recursive=True) if isinstance(entry, RepoFile)}
    remote_train = {path for path in remote if TRAIN_SHARD_RE.fullmatch(path)}
    staged_train = {path for path in shards if TRAIN_SHARD_RE.fullmatch(path)}
    problems += [f"{path}: staged shard missing from the Hub" for path in sorted(staged_train - remote_train)]
    problems += [f"{path}: stale shard on the Hub (not in staging)" for path in sorted(remote_train - staged_train)]
    evidence_shards = []
    for rel in shards:
        local = FileDigest(files[rel].stat().st_size, sha256_file(files[rel]))
        evidence_shards.append({"path": rel, "size": local.size, "sha256": local.sha256})
        problems += _remote_file_problems(rel, files[rel], local, remote.get(rel))
    if CARD_NAME in files:  # the dataset card the export wrote: same bytes on the Hub
        card = FileDigest(files[CARD_NAME].stat().st_size, sha256_file(files[CARD_NAME]))
        problems += _remote_file_problems(CARD_NAME, files[CARD_NAME], card, remote.get(CARD_NAME))
    problems += _manifest_problems(api, target, repo_id, head, files[MANIFEST_NAME])
    if problems:
        raise RlkeepError(target.scrub(
            f"dataset repo {repo_id} at {target.endpoint} failed verification (main at {head}, published "
            f"{commit}):\n" + "\n".join(f"  - {problem}" for problem in problems)))
    return {
        "status": "completed", "repo_id": repo_id, "repo_type": "dataset", "commit": commit,
        "verified_commit": head, "url": f"{target.endpoint}/datasets/{repo_id}", "shards": evidence_shards,
        "manifest": {"path": MANIFEST_NAME, "sha256": sha256_file(files[MANIFEST_NAME])},
    }


def _remote_file_problems(rel: str, path: Path, local: FileDigest, entry: RepoFile | None) -> list[str]:
    if entry is None:
        return [] if TRAIN_SHARD_RE.fullmatch(rel) else [f"{rel}: staged file missing from the Hub"]
    if entry.size != local.size:
        return [f"{rel}: size differs (staging {local.size} bytes, Hub {entry.size} bytes)"]
    if entry.lfs is not None:
        if entry.lfs.sha256 != local.sha256:
            return [f"{rel}: sha256 differs (staging {local.sha256}, Hub LFS oid {entry.lfs.sha256})"]
    elif entry.blob_id != git_blob_sha1_file(path):
        return [f"{rel}: content differs (git blob id on the Hub {entry.blob_id})"]
    return []


def _manifest_problems(api: HfApi, target: HubTarget, repo_id: str, head: str, staged: Path) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="rlkeep-manifest-") as scratch:
        try:
            with hub_step(target, "dataset", repo_id, f"download of {MANIFEST_NAME}"):
                local = api.hf_hub_download(repo_id, MANIFEST_NAME, repo_type="dataset", revision=head,
                                            local_dir=scratch)
        except RlkeepError as error:
            return [f"{MANIFEST_NAME}: cannot be read back from the Hub ({error})"]
        remote_bytes = Path(local).read_bytes()
    staged_bytes = staged.read_bytes()
    if remote_bytes == staged_bytes:
        return []
    try:
        if json.loads(remote_bytes) == json.loads(staged_bytes):
            return []
    except ValueError:
        pass
    return [f"{MANIFEST_NAME}: the Hub copy differs from the staged one "
            f"(sha256 Hub {hashlib.sha256(remote_bytes).hexdigest()}, staging {hashlib.sha256(staged_bytes).hexdigest()})"]


__all__ = [
    "ALLOWED_REMOTE_EXTRAS", "HubTarget", "check_publication", "check_publication_main", "compare_trees",
    "download_fresh", "link_traces_in_card", "publish_model", "publish_model_card", "remote_extras",
    "render_model_card", "replace_trace_shards", "resolve_target",
    "verify_model_publication", "verify_trace_publication",
]


# ---------------------------------------------------------------------------------------------
# Pipeline steps: stage the model, publish and verify it, publish and verify the traces


def dataset_url(repo_id: str, endpoint: str | None = None) -> str:
    base = (endpoint or os.environ.get("HF_ENDPOINT") or PUBLIC_HUB).rstrip("/")
    return f"{base}/datasets/{repo_id}"


TRACES_PENDING = ("The link to this run's agent trace dataset is pending trace verification: it is added here "
                  "once the dataset, rebuilt from the full durable trace tree, has passed its coverage gate and "
                  "its remote verification.")


def traces_section_body(repo_id: str, url: str) -> str:
    return f"The agent traces of this run are the dataset [{repo_id}]({url}), rebuilt from the full durable trace tree."


def render_model_card(*, job: str, publish: dict[str, Any], base_model: str | None, selected: dict[str, Any],
                      export: dict[str, Any], chain: dict[str, Any], tracker_url: str | None,
                      training_logs: list[str]) -> str:
    """README.md with YAML front matter, its Training Traces link pending (link_traces_in_card adds
    it once the trace dataset is verified). base_model comes from the record only, never guessed."""
    import yaml

    front: dict[str, Any] = {}
    if base_model:
        front["base_model"] = base_model
    front["library_name"] = "transformers"
    front["tags"] = ["reinforcement-learning", "agentic", "skyrl", "harbor", "rlkeep"]
    attempts = [a.get("id") for a in chain.get("attempts", [])]
    rule = selected.get("rule") or {}
    lines = [
        "---", yaml.safe_dump(front, sort_keys=False).rstrip(), "---", "",
        f"# {publish['model'].split('/', 1)[1]}", "",
        f"Policy checkpoint of the agentic RL run `{job}` (SkyRL trainer, Harbor agent traces), "
        "preserved and published by rlkeep.", "",
        "## Run", "",
        f"- Attempts (chronological): {', '.join(f'`{a}`' for a in attempts)}",
        f"- Base model: {f'`{base_model}`' if base_model else 'not recorded (rlkeep never guesses it)'}",
    ]
    if tracker_url:
        lines.append(f"- Tracker: {tracker_url}")
    lines += [
        "", "## Selected checkpoint", "",
        f"- Step: {selected.get('step')}",
        f"- Rule: `{json.dumps(rule, sort_keys=True)}`",
        f"- Why: {selected.get('rationale', '')}",
        f"- Source format: {export.get('format', 'unknown')}; parameters (counted from the tensors): "
        f"{export.get('parameter_count', 'unknown')}",
        "", "## Training logs", "",
        "`training_logs/` holds the metric surface across the chain, its report and every attempt's trainer log "
        "(the per-trial results are in the trace dataset):", "",
        *[f"- `training_logs/{name}`" for name in training_logs],
        "", TRACES_HEADING, "",
        TRACES_PENDING, "",
    ]
    return "\n".join(lines)


def _replace_section(text: str, heading: str, body: str) -> str:
    """`text` with the body of its first `heading` section (outside code fences) replaced."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines()
    start = end = None
    fenced = False
    for index, line in enumerate(lines):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        if fenced:
            continue
        if start is None and line.rstrip().rstrip("#").rstrip() == heading:
            start = index
        elif start is not None and re.match(rf"^#{{1,{level}}}\s", line):
            end = index
            break
    if start is None:
        raise RlkeepError(f"the model card has no '{heading}' section to complete")
    end = len(lines) if end is None else end
    return "\n".join([*lines[:start + 1], "", body, "", *lines[end:]]).rstrip("\n") + "\n"


def link_traces_in_card(card: str, repo_id: str, url: str) -> str:
    """The model card with its Training Traces section linking the verified trace dataset and
    `datasets:` in its front matter naming it (the Hub shows the link from there too)."""
    import yaml

    check_repo_id(repo_id)
    if card.startswith("---\n") and (close := card.find("\n---\n", 4)) != -1:
        front = yaml.safe_load(card[4:close]) or {}
        if not isinstance(front, dict):
            raise RlkeepError("the model card's front matter is not a YAML mapping")
        front["datasets"] = [repo_id]
        card = "---\n" + yaml.safe_dump(front, sort_keys=False) + card[close + 1:]
    return _replace_section(card, TRACES_HEADING, traces_section_body(repo_id, url))


def _training_logs(ctx: StepContext, logs_dir: Path) -> list[str]:
    """Metric surface, its report and the chain's trainer logs into training_logs/. Nothing here
    comes from the trace tree: model publication never waits on the trace sync."""
    import tarfile

    names = []
    for key in ("metrics", "report", "superseded", "eval", "plot"):
        path = ctx.inputs.get(key)
        if path is not None and path.is_file():
            shutil.copyfile(path, logs_dir / path.name)
            names.append(path.name)
    for key in ("selected", "export", "chain"):
        path = ctx.inputs.get(key)
        if path is not None and path.is_file():
            (logs_dir / "rlkeep").mkdir(exist_ok=True)
            shutil.copyfile(path, logs_dir / "rlkeep" / path.name)
            names.append(f"rlkeep/{path.name}")
    with tarfile.open(ctx.inputs["logs"]) as tar:
        for slug in ctx.record.attempts:
            member = tar.extractfile(f"attempts/{slug}/trainer.log")
            if member is None:
                raise RlkeepError(f"{ctx.inputs['logs']}: no trainer log for attempt {slug}")
            target = logs_dir / "trainer" / f"{slug}.log"
            target.parent.mkdir(exist_ok=True)
            with open(target, "wb") as handle:
                shutil.copyfileobj(member, handle)
            names.append(f"trainer/{slug}.log")
    return sorted(names)


def stage_model_step(ctx: StepContext) -> None:
    """`<job>/stage/model/`: flat model + training_logs/ + model card, redacted and checked locally."""

    publish = ctx.record.publish
    if publish is None:
        raise RlkeepError(f"{ctx.record.path}: no publish section; staging a model for publication is not applicable")
    stage = ctx.outputs["stage"]
    partial = stage.with_name(f".{stage.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        for source in sorted(ctx.inputs["model"].iterdir()):
            if source.is_file() and not source.name.startswith("."):
                link_or_copy(source, partial / source.name)
        logs_dir = partial / "training_logs"
        logs_dir.mkdir(parents=True)
        names = _training_logs(ctx, logs_dir)
        card = render_model_card(job=ctx.job, publish=publish, base_model=ctx.record.base_model,
                                 selected=read_json(ctx.inputs["selected"]), export=read_json(ctx.inputs["export"]),
                                 chain=read_json(ctx.inputs["chain"]), tracker_url=ctx.record.tracker_url,
                                 training_logs=names)  # its trace link waits for verify/traces.json
        (partial / "README.md").write_text(card, encoding="utf-8")
        redactor = redactor_from_environment()
        redacted = redact_tree(partial, redactor)
        remaining = redact_tree(partial, redactor, check=True)
        if remaining.findings:
            raise RlkeepError(f"{stage}: credential-shaped text remains after redaction: "
                              + ", ".join(f"{f.path}:{f.line} ({f.kind})" for f in remaining.findings[:10]))
        problems = check_publication(partial, pending_traces_link=True)
        if problems:
            raise RlkeepError(f"{stage}: staged model is not publishable: " + "; ".join(problems))
        if stage.exists():
            shutil.rmtree(stage)
        os.replace(partial, stage)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    write_json(ctx.outputs["redaction"], {
        "status": "completed",
        "redacted": [{"kind": f.kind, "path": f.path, "line": f.line} for f in redacted.findings],
        "files_scanned": remaining.files_scanned,
        "files_skipped": [{"path": p, "reason": r} for p, r in remaining.files_skipped],
        "check_findings": 0,
    })


def _tree_bytes(root: Path) -> int:
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())


def _destinations_or_not_applicable(ctx: StepContext) -> dict[str, Any] | None:
    """The record's publish block; without one, the verify sentinel says why nothing was published."""

    if ctx.record.publish is None:
        write_json(ctx.outputs["verify"], not_applicable("the record names no publish destinations"))
    return ctx.record.publish


def publish_model_step(ctx: StepContext) -> None:
    """`<job>/verify/model_upload.json`: upload the staged model additively (its card's trace link
    pending), download fresh, run the redaction check and every publication check but the link."""

    publish = _destinations_or_not_applicable(ctx)
    if publish is None:
        return
    stage = ctx.inputs["stage"]
    check_transfer(ctx, nbytes=_tree_bytes(stage), what=f"model upload to {publish['model']}")
    published = publish_model(stage, publish["model"], private=bool(publish.get("private", True)),
                              commit_message=f"rlkeep: publish {ctx.job}")
    work_dir = ctx.work_dir("publish_model")
    evidence = verify_model_publication(stage, publish["model"], published["commit"], work_dir,
                                        redactor=redactor_from_environment(), pending_traces_link=True)
    download = evidence.get("download_dir")
    if download:
        shutil.rmtree(download, ignore_errors=True)
    write_json(ctx.outputs["verify"], {**evidence, "status": "completed", "published": published,
                                       "training_traces_link": "pending trace verification"})


def _verified_traces(ctx: StepContext, repo_id: str) -> dict[str, Any]:
    """verify/traces.json of this record's trace dataset: the destination the card may link."""

    path = ctx.inputs["traces"]
    evidence = read_json(path)
    if not isinstance(evidence, dict) or evidence.get("status") != "completed":
        status = evidence.get("status") if isinstance(evidence, dict) else type(evidence).__name__
        raise RlkeepError(f"{path}: status {status!r}; the model card links the trace dataset only once it is "
                          "verified (status 'completed')")
    if evidence.get("repo_id") != repo_id or not evidence.get("url"):
        raise RlkeepError(f"{path}: verifies {evidence.get('repo_id')!r}, not the record's publish.traces "
                          f"{repo_id!r}; rerun publish_traces")
    return evidence


def link_model_card_step(ctx: StepContext) -> None:
    """`<job>/verify/model.json`: once the trace dataset is verified, link it from the model card
    in one commit that changes README.md only, download fresh and run every check again, the link
    included. The card committed is kept in <job>/stage/model_card/README.md."""

    publish = _destinations_or_not_applicable(ctx)
    if publish is None:
        return
    upload = read_json(ctx.inputs["upload"])
    if upload.get("status") != "completed":
        raise RlkeepError(f"{ctx.inputs['upload']}: status {upload.get('status')!r}; the model must be uploaded "
                          "and verified before its card is completed")
    repo_id = publish.get("traces")
    if not repo_id:
        raise RlkeepError(f"{ctx.record.path}: field 'publish.traces' is missing; the model card's Training Traces "
                          "section needs the trace dataset the record names")
    traces = _verified_traces(ctx, repo_id)
    stage = ctx.inputs["stage"]
    card = ctx.job_dir / "stage" / "model_card" / CARD_NAME
    linked = link_traces_in_card((stage / CARD_NAME).read_text(encoding="utf-8"), repo_id, traces["url"])
    atomic_write_bytes(card, linked.encode("utf-8"))
    redactor = redactor_from_environment()
    findings = redact_tree(card.parent, redactor, check=True).findings
    if findings:
        raise RlkeepError(f"{card}: credential-shaped text in the model card: "
                          + ", ".join(_finding_text(finding) for finding in findings[:10]))
    published = publish_model_card(card, publish["model"],
                                   commit_message=f"rlkeep: link the verified trace dataset {repo_id}")
    evidence = verify_model_publication(stage, publish["model"], published["commit"], ctx.work_dir("link_model_card"),
                                        redactor=redactor, traces_repo=repo_id, card=card)
    download = evidence.get("download_dir")
    if download:
        shutil.rmtree(download, ignore_errors=True)
    write_json(ctx.outputs["verify"], {
        **evidence, "status": "completed", "published": published, "upload_commit": upload.get("commit"),
        "card": card.relative_to(ctx.job_dir).as_posix(),
        "training_traces_link": {"dataset": repo_id, "url": traces["url"], "traces_commit": traces.get("commit")},
    })


def publish_traces_step(ctx: StepContext) -> None:
    """`<job>/verify/traces.json`: replace the remote shard set in one commit, then verify it."""

    publish = _destinations_or_not_applicable(ctx)
    if publish is None:
        return
    stage = ctx.inputs["stage"]
    manifest = read_json(stage / MANIFEST_NAME)
    check_transfer(ctx, nbytes=_tree_bytes(stage), what=f"trace dataset upload to {publish['traces']}")
    published = replace_trace_shards(stage, publish["traces"], private=bool(publish.get("private", True)),
                                     commit_message=f"Replace trace export with {manifest.get('row_count')} rows")
    evidence = verify_trace_publication(stage, publish["traces"], published["commit"])
    write_json(ctx.outputs["verify"], {**evidence, "status": "completed", "published": published})


# ---------------------------------------------------------------------------------------------
# Archive copy in a dataset repo (archive.dest: hf://datasets/<org>/<name>)


def upload_archive_to_hub(tgz: Path, manifest: Path, repo_id: str, job: str, *, private: bool = True,
                          endpoint: str | None = None, token: str | None = None) -> dict[str, Any]:
    """Add `<job>/<tgz name>` and `<job>/MANIFEST` to a dataset repo in one additive commit (every
    other file of the repo stays), then download both fresh at that commit and compare size and
    sha256 with the local files. Any difference raises RlkeepError."""
    tgz, manifest = Path(tgz), Path(manifest)
    check_repo_id(repo_id)
    if not job or "/" in job or job in {".", ".."}:
        raise RlkeepError(f"archive upload: job {job!r} is not a valid folder name")
    for path in (tgz, manifest):
        if not path.is_file():
            raise RlkeepError(f"{path}: missing; build and verify the archive before uploading it")
    target = resolve_target(endpoint, token)
    api = target.api()
    created, is_private = ensure_repo(api, target, repo_id, "dataset", private)
    head = head_of(api, target, repo_id, "dataset")
    operations = [CommitOperationAdd(path_in_repo=f"{job}/{path.name}", path_or_fileobj=str(path))
                  for path in (tgz, manifest)]
    with hub_step(target, "dataset", repo_id, "archive upload", f"the local archive {tgz} is untouched; rerun"):
        info = api.create_commit(repo_id, operations, commit_message=f"rlkeep: archive {job}", repo_type="dataset",
                                 parent_commit=head)
    objects = []
    with tempfile.TemporaryDirectory(prefix="rlkeep-archive-verify-") as scratch:
        for path in (tgz, manifest):
            name = f"{job}/{path.name}"
            with hub_step(target, "dataset", repo_id, f"download of {name} at {info.oid}"):
                fresh = Path(api.hf_hub_download(repo_id, name, repo_type="dataset", revision=info.oid,
                                                 local_dir=scratch))
            local = FileDigest(path.stat().st_size, sha256_file(path))
            remote = FileDigest(fresh.stat().st_size, sha256_file(fresh))
            if remote != local:
                raise RlkeepError(f"dataset repo {repo_id} at {target.endpoint}: {name} downloaded fresh has "
                                  f"{remote.size} bytes, sha256 {remote.sha256}; local {path} has {local.size} bytes, "
                                  f"sha256 {local.sha256}; the archive upload is not verified")
            objects.append({"path_in_repo": name, "size": remote.size, "sha256": remote.sha256})
    return {"status": "completed", "dest": f"hf://datasets/{repo_id}/{job}", "repo_id": repo_id,
            "repo_type": "dataset", "commit": info.oid, "created": created, "private": is_private,
            "objects": objects,
            "verified": "size and sha256 of a fresh download at the upload commit, against the local files"}
