"""`rlkeep redact ROOT [--check]`: redact a tree in place and print the findings as JSON."""
from __future__ import annotations


import argparse
import sys


from rlkeep.jsonio import dumps
from rlkeep.redaction.engine import redactor_from_environment
from rlkeep.redaction.walk import redact_tree


def cli_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="rlkeep redact",
        description="Redact credential-shaped text under ROOT in place; print the findings as JSON "
                    "(kind, path, line; never the value).")
    parser.add_argument("root", help="directory (or single file) to redact")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if credential-shaped text remains")
    args = parser.parse_args(argv)
    report = redact_tree(args.root, redactor_from_environment(), check=args.check)
    sys.stdout.write(dumps(report.to_json()))
    if args.check and report.findings:
        print(f"rlkeep: credential-shaped text remains under {args.root}: {len(report.findings)} finding(s)",
              file=sys.stderr)
        return 1
    return 0
