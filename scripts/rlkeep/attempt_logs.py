"""Which files in logs.tar an attempt left for the generation statistics, and which are not read and why.

Besides the trainer's stdout (`attempts/<slug>/trainer.log`), the log sync keeps every durable
non-weight object of the store under `store/`. Three kinds of them carry vLLM stat lines and
batch lines when the run sent its infrastructure output away from stdout:
- vLLM's own log: `vllm.log`, or a `.log` file in a `vllm/` folder (a server started on its own);
- SkyRL's infrastructure log, the file `SKYRL_LOG_FILE` names: `initialize_ray()` sets it to
  `{trainer.log_path}/infra-YYMMDD_HHMMSS.log` and the vLLM engines and workers `os.dup2` their
  stdout and stderr into it (NovaSky-AI/SkyRL skyrl/train/utils/utils.py, ray_logging.py);
- Ray's worker outputs in a session's `logs/` folder: `worker-<worker id>-<job id>-<pid>.out|err`.
A file belongs to the attempt whose slug is one of its folder names or its file stem; in a chain of
one attempt every such file is that attempt's. A Ray worker output whose pid already printed into the
trainer's stdout is not read again: Ray forwards a worker's output to the driver (log_to_driver), so
its lines were read there.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

TRAINER = "trainer stdout"
VLLM = "vLLM log"
INFRA = "SkyRL infrastructure log (SKYRL_LOG_FILE)"
RAY_WORKER = "Ray worker output"

INFRA_NAME = re.compile(r"infra-\d{6}_\d{6}\.log")
RAY_WORKER_NAME = re.compile(r"worker-[0-9a-f]+-[0-9a-f]+-(?P<pid>\d+)\.(?:out|err)")
LOG_SUFFIXES = (".log", ".out", ".err")
STORE_PREFIX = "store/"


@dataclass(frozen=True)
class LogFile:
    member: str  # the name in logs.tar
    attempt: str
    kind: str
    pid: int | None = None  # a Ray worker output's process id (from its file name)


@dataclass
class LogPlan:
    read: list[LogFile] = field(default_factory=list)  # chain order; each attempt's trainer stdout first
    not_read: list[tuple[str, str]] = field(default_factory=list)  # (member, why)


def _kind(path: PurePosixPath) -> tuple[str, int | None] | None:
    if path.name == "vllm.log" or (path.parent.name == "vllm" and path.suffix == ".log"):
        return VLLM, None
    if INFRA_NAME.fullmatch(path.name):
        return INFRA, None
    worker = RAY_WORKER_NAME.fullmatch(path.name)
    if worker:
        return RAY_WORKER, int(worker["pid"])
    return None


def _owner(path: PurePosixPath, attempts: Sequence[str]) -> str | None:
    named = [a for a in attempts if a in path.parts[:-1] or path.stem == a]
    if len(named) == 1:
        return named[0]
    return attempts[0] if len(attempts) == 1 and not named else None


def plan_logs(members: Iterable[str], attempts: Sequence[str], logs_layout: str = "logs") -> LogPlan:
    """Sort logs.tar member names into the files each attempt left (read) and the log files that
    are not read, with the reason. Only names ending in .log/.out/.err are considered."""
    plan = LogPlan()
    extra: dict[str, list[LogFile]] = {slug: [] for slug in attempts}
    present = set()
    trainer_copies = {f"{STORE_PREFIX}{logs_layout.strip('/')}/{slug}.out": slug for slug in attempts}
    for member in members:
        if member.startswith("attempts/") and member.endswith("/trainer.log"):
            present.add(member)
            continue
        if not member.startswith(STORE_PREFIX) or not member.endswith(LOG_SUFFIXES):
            continue
        if member in trainer_copies:
            plan.not_read.append((member, f"the store's copy of attempt {trainer_copies[member]}'s trainer stdout, "
                                          "read from attempts/<slug>/trainer.log"))
            continue
        path = PurePosixPath(member[len(STORE_PREFIX):])
        kind = _kind(path)
        if kind is None:
            plan.not_read.append((member, "not a vLLM, SkyRL infrastructure or Ray worker log"))
            continue
        owner = _owner(path, attempts)
        if owner is None:
            plan.not_read.append((member, f"{kind[0]}, but no folder or file name in its path names exactly one "
                                          "attempt of the chain"))
            continue
        extra[owner].append(LogFile(member, owner, kind[0], kind[1]))
    for slug in attempts:
        trainer = f"attempts/{slug}/trainer.log"
        if trainer in present:
            plan.read.append(LogFile(trainer, slug, TRAINER))
        plan.read.extend(sorted(extra[slug], key=lambda f: f.member))
    return plan
