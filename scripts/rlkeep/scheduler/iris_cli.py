"""IrisCli: the `iris` command on PATH, bound to one cluster, called only in the forms it offers
(rlkeep.scheduler.iris_forms): a job's state, the jobs under a prefix, an exact stop, and an
attempt's log with proof of completeness (LogFetch). A job the controller no longer knows
("not found": finished jobs are deleted after a retention period) raises JobGoneError. LogFetch,
JobGoneError and the LogCommand it is are the interface's (rlkeep.scheduler.interface), which
knows no scheduler.

Commands are argument lists run without a shell: record values never meet a shell parser.
"""
from __future__ import annotations

import shutil
import subprocess
from typing import Any

from rlkeep.errors import SchedulerError
from rlkeep.scheduler.interface import COMMAND_TIMEOUT_S, JobGoneError, LogFetch
from rlkeep.scheduler.iris_forms import IRIS_LIST_LIMIT, IrisForms, choose_forms, log_cap, parse_help
from rlkeep.scheduler.iris_output import JobSummary, gone_entry, parse_job_list, parse_summary_json, parse_summary_text


def _line_count(text: str) -> int:
    return text.count("\n") + (0 if text.endswith("\n") or not text else 1)


class IrisCli:
    """The `iris` command on PATH, bound to one cluster. What it offers is read once per process."""

    _forms_cache: dict[tuple[str, str], IrisForms] = {}

    def __init__(self, cluster: str, executable: str = "iris") -> None:
        self.cluster = cluster
        self.executable = executable

    def _binary(self) -> str:
        binary = shutil.which(self.executable)
        if binary is None:
            raise SchedulerError(f"the `{self.executable}` command is not on PATH; install the Iris CLI or use scheduler: none")
        return binary

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [self._binary(), f"--cluster={self.cluster}", *args]
        try:
            result = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise SchedulerError(f"`iris {' '.join(args)}` did not answer within {COMMAND_TIMEOUT_S}s") from None
        if check and result.returncode != 0:
            self._raise(args, result)
        return result

    def _raise(self, args: tuple[str, ...], result: subprocess.CompletedProcess[str]) -> None:
        message = (f"`iris --cluster={self.cluster} {' '.join(args)}` exited {result.returncode}: "
                   f"{result.stderr.strip()[-500:]}")
        if result.returncode != 2 and "not found" in result.stderr.lower():
            raise JobGoneError(message)
        raise SchedulerError(message)

    @property
    def forms(self) -> IrisForms:
        key = (self._binary(), self.cluster)
        if key not in self._forms_cache:
            commands, _ = parse_help(self._run("job", "--help").stdout)
            options = {name: parse_help(self._run("job", name, "--help").stdout)[1]
                       for name in commands if name in {"summary", "describe", "list", "stop", "kill", "cancel", "logs"}}
            self._forms_cache[key] = choose_forms(commands, options)
        return self._forms_cache[key]

    def _call(self, form: tuple[str, ...], **values: str) -> subprocess.CompletedProcess[str]:
        return self._run("job", *(part.format(**values) if "{" in part else part for part in form))

    def summary(self, job_id: str) -> JobSummary:
        """The job's state by the best form this CLI offers; JobGoneError when the controller forgot it."""
        forms = self.forms
        form = forms.require("status")
        if forms.status_source == "list":
            rows = dict(self.list_jobs(job_id))
            if job_id not in rows:
                raise JobGoneError(f"`iris job {' '.join(form).format(prefix=job_id)}` does not list {job_id}")
            state = rows[job_id]
            return JobSummary(job_id=job_id, state=state, exit_code=None, failure_count=None, preemption_count=None,
                              source="list")
        result = self._call(form, job=job_id)
        if forms.status_source == "summary --json":
            return parse_summary_json(job_id, result.stdout)
        return parse_summary_text(job_id, result.stdout, forms.status_source or "summary")

    def entry(self, job_id: str) -> dict[str, Any]:
        """A chain.json entry: the summary, or `gone` with the controller's answer."""
        try:
            return self.summary(job_id).to_json()
        except JobGoneError as error:
            return gone_entry(job_id, str(error))

    def list_jobs(self, prefix: str) -> list[tuple[str, str]]:
        """(id, state) of every job whose id starts with `prefix` (filtered here when the CLI cannot)."""
        form = self.forms.require("list")
        rows = [row for row in parse_job_list(self._call(form, prefix=prefix).stdout) if row[0].startswith(prefix)]
        if "--limit" in form and len(rows) >= IRIS_LIST_LIMIT:
            raise SchedulerError(f"`iris job list --prefix {prefix}` returned its limit of {IRIS_LIST_LIMIT} jobs; "
                                 "the listing may be incomplete")
        return rows

    def stop(self, job_id: str) -> str:
        return self._call(self.forms.require("stop"), job=job_id).stdout

    def logs(self, job_id: str) -> LogFetch:
        """The log with proof of completeness, or with the reason it cannot be proven.

        The head and the tail fetch with the same cap returning the same lines, fewer than the
        cap, prove the whole log (a server that clamps silently would return different ends).
        A log longer than one fetch cannot be paged (the printed lines carry only hh:mm:ss),
        and a CLI that fetches one end only proves nothing. JobGoneError when the job is gone.
        """
        forms = self.forms
        cap = log_cap()
        if forms.logs_head and forms.logs_tail:
            head = self._call(forms.logs_head, job=job_id, n=str(cap)).stdout
            tail = self._call(forms.logs_tail, job=job_id, n=str(cap)).stdout
            shown = ("iris job " + " ".join(forms.logs_head) + " | iris job " + " ".join(forms.logs_tail)).format(
                job=job_id, n=cap)
            lines = _line_count(head)
            if head == tail and lines < cap and lines > 0:
                return LogFetch(head, True, f"the head and the tail fetch of at most {cap:,} lines returned the same "
                                            f"{lines:,} lines", shown)
            if lines == 0 and not tail:
                return LogFetch(head, None, "the CLI returned an empty log (what it returns for a job that never "
                                            "started, or whose log it lost)", shown)
            return LogFetch(None, False, f"the log is longer than one fetch ({cap:,} lines per call): the head and "
                                         "the tail differ, and this CLI cannot page (its lines carry no date)", shown)
        if forms.logs_one_end:
            text = self._call(forms.logs_one_end, job=job_id, n=str(cap)).stdout
            shown = "iris job " + " ".join(forms.logs_one_end).format(job=job_id, n=cap)
            lines = _line_count(text)
            if lines >= cap:
                return LogFetch(None, False, f"one fetch returned the {cap:,}-line cap: the log is truncated", shown)
            return LogFetch(text, None, f"this CLI fetches one end of a log only (no head/tail pair, no paging): "
                                        f"{lines:,} lines returned, which does not prove the log is complete", shown)
        return LogFetch(None, False, f"the installed iris CLI offers no {forms.missing.get('logs', '`job logs`')}", None)
