"""Scheduler access: Iris or SLURM through their command lines, or `none` (logs come from the store).

The pipeline sees one interface, `scheduler_for(record)` -> Scheduler (IrisScheduler,
SlurmScheduler, NoScheduler): `capture` (chain.json's attempts), `stop_retries` (retries.json,
through the one exact-stop loop `stop_each`), where an attempt's trainer log is read
(`log_cli`, `stdout_paths`; rlkeep.sync). A new scheduler is one more subclass in SCHEDULERS and
one more entry of rlkeep.records.CHAIN_ID_CHECKS (its chain's job-id shape).
Commands are argument lists run without a shell: record values never meet a shell parser.

The modules, one job each:
- interface: the Scheduler interface and what every scheduler shares (stop_each, LogFetch); it
  imports no scheduler, so the Iris modules below it import it and never the other way;
- named: SCHEDULERS by record name, and scheduler_for;
- iris_output, iris_forms, iris_cli: what the iris CLI prints, which calls the installed
  version offers (read from its --help), and the CLI itself;
- iris: Iris chain capture, unrecorded attempts and the exact stop of pending retries;
- slurm: scontrol/sacct/scancel and SlurmScheduler; none: NoScheduler;
- step: the pipeline steps capture_chain_step and stop_retries_step.
"""
from __future__ import annotations

from rlkeep.scheduler.interface import JobGoneError, LogCommand, LogFetch, Scheduler, stop_each
from rlkeep.scheduler.iris import (IrisScheduler, active_unrecorded, chains_of_other_records, children_in_the_way,
                                   extends_run, refuse_while_unrecorded_attempts_run, stop_pending_retries,
                                   unrecorded_attempts)
from rlkeep.scheduler.iris_cli import IrisCli
from rlkeep.scheduler.iris_forms import IrisForms, choose_forms, log_cap, parse_help
from rlkeep.scheduler.iris_output import (GONE, PENDING_STATES, TERMINAL_STATES, UNFINISHED_STATES, JobSummary,
                                          gone_entry, normalise_state, parse_job_list, parse_summary_json,
                                          parse_summary_text)
from rlkeep.scheduler.named import SCHEDULERS, scheduler_for
from rlkeep.scheduler.none import NoScheduler
from rlkeep.scheduler.slurm import (SlurmCli, SlurmScheduler, entry_from_sacct, entry_from_scontrol,
                                    expand_stdout_path, parse_scontrol_line, stop_pending_slurm)
from rlkeep.scheduler.step import capture_chain_step, stop_retries_step

__all__ = [
    "GONE", "PENDING_STATES", "SCHEDULERS", "TERMINAL_STATES", "UNFINISHED_STATES", "IrisCli", "IrisForms",
    "IrisScheduler", "JobGoneError", "JobSummary", "LogCommand", "LogFetch", "NoScheduler", "Scheduler", "SlurmCli",
    "SlurmScheduler", "active_unrecorded", "capture_chain_step", "chains_of_other_records", "children_in_the_way",
    "choose_forms", "entry_from_sacct", "entry_from_scontrol", "expand_stdout_path", "extends_run", "gone_entry",
    "log_cap", "normalise_state", "parse_help", "parse_job_list", "parse_scontrol_line", "parse_summary_json",
    "parse_summary_text", "refuse_while_unrecorded_attempts_run", "scheduler_for", "stop_each", "stop_pending_retries",
    "stop_pending_slurm", "stop_retries_step", "unrecorded_attempts",
]
