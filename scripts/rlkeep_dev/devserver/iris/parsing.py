"""Click-like argument parsing, usage errors and `--help` text for the emulated `iris job` commands."""
from __future__ import annotations

from typing import Any

from .versions import Command, Opt


class UsageError(Exception):
    def __init__(self, message: str, usage: str, help_hint: str) -> None:
        super().__init__(message)
        self.message, self.usage, self.help_hint = message, usage, help_hint


def usage_lines(command: Command | None) -> tuple[str, str]:
    if command is None:
        return "Usage: iris job [OPTIONS] COMMAND [ARGS]...", "Try 'iris job --help' for help."
    args = f" {command.args}" if command.args else ""
    return f"Usage: iris job {command.name} [OPTIONS]{args}", f"Try 'iris job {command.name} --help' for help."


def _option_index(command: Command) -> dict[str, Opt]:
    return {name: opt for opt in command.options for name in opt.names}


def parse_args(command: Command, argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Options (by first name) and positionals, as click would parse them, or UsageError."""
    usage, hint = usage_lines(command)
    index = _option_index(command)
    values: dict[str, Any] = {opt.names[0]: opt.default for opt in command.options}
    positionals: list[str] = []
    items = list(argv)
    while items:
        token = items.pop(0)
        if token == "--":
            positionals.extend(items)
            break
        if token.startswith("-") and token != "-":
            name, eq, inline = token.partition("=")
            opt = index.get(name)
            if opt is None:
                raise UsageError(f"No such option: {name}", usage, hint)
            key = opt.names[0]
            if opt.kind == "flag":
                values[key] = True
            elif opt.kind == "pair":
                values[key] = name == opt.names[0]
            else:
                if eq:
                    raw = inline
                elif items:
                    raw = items.pop(0)
                else:
                    raise UsageError(f"Option '{name}' requires an argument.", usage, hint)
                if opt.kind == "int":
                    try:
                        number = int(raw)
                    except ValueError:
                        raise UsageError(f"Invalid value for '{name}': '{raw}' is not a valid integer.", usage, hint) from None
                    if (opt.low is not None and number < opt.low) or (opt.high is not None and number > opt.high):
                        raise UsageError(f"Invalid value for '{name}': {number} is not in the range "
                                         f"{opt.low}<=x<={opt.high}.", usage, hint)
                    values[key] = number
                else:
                    values[key] = raw
            continue
        positionals.append(token)
    if command.args == "JOB_ID":
        if not positionals:
            raise UsageError("Missing argument 'JOB_ID'.", usage, hint)
        if len(positionals) > 1:
            raise UsageError(f"Got unexpected extra argument ({positionals[1]})", usage, hint)
    elif not command.args and positionals:
        raise UsageError(f"Got unexpected extra argument ({positionals[0]})", usage, hint)
    return values, positionals


def _option_help_lines(opt: Opt) -> str:
    names = " / ".join(opt.names) if opt.kind == "pair" else ", ".join(sorted(opt.names, key=len))
    if opt.kind in ("int", "str"):
        names += " INTEGER" if opt.kind == "int" else " TEXT"
        if opt.low is not None:
            names += f" RANGE"
    if len(names) > 30:
        return f"  {names}\n{' ' * 34}{opt.help}"
    return f"  {names:<32}{opt.help}"


def command_help(command: Command) -> str:
    usage, _ = usage_lines(command)
    lines = [usage, "", f"  {command.help}", "", "Options:"]
    lines += [_option_help_lines(opt) for opt in command.options]
    lines.append(f"  {'--help':<32}Show this message and exit.")
    return "\n".join(lines) + "\n"


def group_help(commands: dict[str, Command]) -> str:
    usage, _ = usage_lines(None)
    width = max(len("--help"), *(len(name) for name in commands)) + 2
    lines = [usage, "", "  Job management commands.", "", "Options:", f"  {'--help':<{width}}Show this message and exit.",
             "", "Commands:"]
    lines += [f"  {name:<{width}}{command.help}" for name, command in commands.items()]
    return "\n".join(lines) + "\n"

