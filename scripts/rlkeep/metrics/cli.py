"""`rlkeep metrics LOGS... --out DIR`."""
from __future__ import annotations

import argparse
from pathlib import Path

from rlkeep.metrics.common import MAX_SKIPPED_NAMED, MetricsError, NoMetricsError
from rlkeep.metrics.parse import ParsedLog, parse_log_file
from rlkeep.metrics.report import write_outputs
from rlkeep.metrics.surface import AttemptWithoutMetrics, surface_from_parsed
from rlkeep.metrics.trials import iter_result_files, trials_from_results


# --------------------------------------------------------------------------- CLI

def cli_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="rlkeep metrics",
        description="Build the metric surface from trainer logs given in chain order (attempt = file stem).")
    parser.add_argument("logs", nargs="+", help="trainer logs, oldest attempt first")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--results-dir", help="trace directory holding <trial>/result.json")
    parser.add_argument("--job", help="job name for the report title")
    args = parser.parse_args(argv)
    parsed: list[tuple[str, ParsedLog]] = []
    dead: list[AttemptWithoutMetrics] = []
    for log in args.logs:
        path = Path(log)
        if not path.is_file():
            raise MetricsError(f"{log}: trainer log does not exist")
        try:
            parsed.append((path.stem, parse_log_file(path, source=str(log))))
        except NoMetricsError as error:
            if len(args.logs) == 1:
                raise  # one log without metrics is what the operator asked about: an error naming it
            dead.append(AttemptWithoutMetrics(path.stem, str(log), error.reason, bytes=path.stat().st_size,
                                              skipped=error.skipped))
    surface = surface_from_parsed(parsed, dead, chain=[Path(log).stem for log in args.logs])
    trials = trials_from_results(iter_result_files(args.results_dir)) if args.results_dir else []
    write_outputs(surface, trials, args.out, job=args.job)
    for info in surface.files:
        print(f"{info['source']}: {info['serialization']}, {len(info['steps'])} steps")
    for entry in dead:
        print(f"{entry.source}: no metrics ({entry.reason}), no rows")
    skipped = surface.skipped_lines()
    for entry in skipped[:MAX_SKIPPED_NAMED]:
        print(f"{entry['source']}:{entry['line']}: skipped {entry['kind']} line: {entry['reason']}")
    malformed = sum(1 for trial in trials if trial.get("error"))
    print(f"metrics: {len(surface.rows)} steps, {len(surface.superseded)} superseded rows, "
          f"{len(trials)} trials ({malformed} malformed), {len(skipped)} unparsable metric lines skipped "
          f"-> {args.out}")
    return 0
