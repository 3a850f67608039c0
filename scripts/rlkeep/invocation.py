"""What one Snakemake invocation of the pipeline says and leaves behind, apart from its rules.

- Admission: the DONE targets the campaign target (`all`) plans (rlkeep.settled decides which jobs).
- Planning notes: the records refused and the new jobs held back, said once when planning (however
  often Snakemake asks for the inputs) and again at the end, where a long run's log does not bury
  them. An `Invocation` owns them; rules/invocation.smk holds the one instance of the workflow.
- The views at exit: every started job's STATUS.json and the campaign pages, written when the
  Snakemake process ends, also when it had nothing to do or only showed its plan (-n), where it
  runs no onsuccess handler.
"""
from __future__ import annotations

import atexit
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

from rlkeep.settled import admitted_jobs, named_in_config, refusal_message, waiting_message


class Invocation:
    """The planning notes of one invocation and the handler that writes the views at its end."""

    def __init__(self, data_root: Path, records_dir: Path, stream: TextIO | None = None) -> None:
        self.data_root = data_root
        self.records_dir = records_dir
        self._stream = stream
        self._notes: list[str] = []

    @property
    def notes(self) -> tuple[str, ...]:
        return tuple(self._notes)

    def _print(self, text: str) -> None:
        print(text, file=self._stream or sys.stderr)

    def say_once(self, notes: Iterable[str]) -> None:
        """Keep and print the notes unless some were already said (planning asks more than once)."""
        if self._notes:
            return
        self._notes = list(notes)
        for note in self._notes:
            self._print(note)

    def repeat_notes(self) -> None:
        for note in self._notes:
            self._print(note)

    def campaign_targets(
        self,
        jobs: Iterable[str],
        *,
        config: Mapping[str, Any],
        max_new_jobs: int | None,
        needs_planning: Callable[[str], bool],
        load_error: Callable[[str], str | None],
    ) -> list[str]:
        """`<job>/DONE` of each job the campaign target plans (rlkeep.settled.admitted_jobs); the
        refused records and the jobs that wait become the planning notes."""
        admission = admitted_jobs(
            list(jobs),
            started=lambda job: (self.data_root / job).is_dir(),
            needs_planning=needs_planning,
            named=lambda job: named_in_config(config, job),
            max_new_jobs=max_new_jobs,
            loads=lambda job: load_error(job) is None,
        )
        notes = []
        if admission.refused:
            notes.append(refusal_message([str(load_error(job)) for job in admission.refused]))
        if admission.waiting and max_new_jobs is not None:
            notes.append(waiting_message(admission.waiting, max_new_jobs))
        self.say_once(notes)
        return [f"{job}/DONE" for job in admission.planned]

    def write_views(self) -> None:
        """STATUS.json and campaign/ (rlkeep.campaign.writer, their one writer). A failure here is
        reported and does not hide the run's own result."""
        try:
            from rlkeep.campaign.writer import write_views
            from rlkeep.report import invocation_from_argv

            write_views(self.data_root, self.records_dir, invocation=invocation_from_argv(sys.argv))
        except Exception as error:  # noqa: BLE001 - the run's outcome matters more than its view
            self._print(f"rlkeep: STATUS.json and campaign/ were not refreshed: {error}")

    def write_views_at_exit(self) -> bool:
        """Register write_views for the process's exit when the data root holds the records folder."""
        if not (self.data_root / self.records_dir).is_dir():
            return False
        atexit.register(self.write_views)
        return True
