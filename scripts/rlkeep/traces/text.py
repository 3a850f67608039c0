"""What happens to text before it enters a row: lone surrogates become U+FFFD (always), terminal
noise is cleaned (an option), credentials are redacted (always), with counts per kind."""
from __future__ import annotations

import re
from collections import Counter
from typing import Protocol


class TextRedactor(Protocol):
    def redact_text(self, text: str) -> tuple[str, list[tuple[int, str]]]: ...


# Control characters other than tab and newline (ESC and CR included), as bytes: checking a
# text with bytes.translate is several times faster than a regex search, and most texts are clean.
_CONTROL_BYTES = bytes(range(0x00, 0x09)) + b"\x0b\x0c" + bytes(range(0x0d, 0x20)) + b"\x7f"
SURROGATE = re.compile(r"[\ud800-\udfff]")
_ESCAPE_SEQUENCE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"          # CSI: colours, cursor moves, bracketed paste ESC[?2004h, ESC[200~
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window titles, hyperlinks
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"   # DCS, SOS, PM, APC strings
    r"|\x1b[ -/]+[0-~]"                 # nF escapes, e.g. charset selection ESC(B
    r"|\x1b[0-~]"                       # other two-character escapes
)
# Bracketed-paste markers whose ESC was already stripped or is shown as ^[ (longest first).
_PASTE_MARKERS = ("^[[200~", "^[[201~", "[200~", "[201~")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _overwrite_line(line: str) -> str:
    """What a terminal shows for a line with carriage returns: each segment overwrites from column 0."""
    shown = ""
    for segment in line.split("\r"):
        shown = segment + shown[len(segment):]
    return shown


def _needs_cleaning(text: str) -> bool:
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return True
    return len(data.translate(None, _CONTROL_BYTES)) != len(data) or b"[20" in data


def has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def clean_text(text: str, repairs: Counter[str] | None = None) -> str:
    """Replace lone surrogates with U+FFFD and remove terminal noise; counts go to `repairs`."""
    if not _needs_cleaning(text):
        return text
    cleaned = text
    if has_lone_surrogate(cleaned):
        cleaned = SURROGATE.sub("\ufffd", cleaned)
        if repairs is not None:
            repairs["lone_surrogate"] += 1
    before = cleaned
    # Each pass only when its marker is present: plain `in` scans are far cheaper than regexes.
    if "\x1b" in cleaned:
        cleaned = _ESCAPE_SEQUENCE.sub("", cleaned)
    if "[20" in cleaned:
        for marker in _PASTE_MARKERS:
            cleaned = cleaned.replace(marker, "")
    if "\r" in cleaned:
        cleaned = cleaned.replace("\r\n", "\n")
        if "\r" in cleaned:
            cleaned = "\n".join(_overwrite_line(line) if "\r" in line else line
                                for line in cleaned.split("\n"))
    if _needs_cleaning(cleaned):
        cleaned = _CONTROL.sub("", cleaned)
    if repairs is not None and cleaned != before:
        repairs["terminal_noise"] += 1
    return cleaned


def replace_lone_surrogates(text: str, repairs: Counter[str] | None = None) -> str:
    """Lone surrogates cannot be written as UTF-8 (parquet text): each becomes U+FFFD. This is
    the one change made to text besides redaction when terminal-noise cleaning is off."""
    if not has_lone_surrogate(text):
        return text
    if repairs is not None:
        repairs["lone_surrogate"] += 1
    return SURROGATE.sub("\ufffd", text)


class Scrubber:
    """(Optionally clean, then) redact each text once; keeps counts per repair and per redaction kind."""

    def __init__(self, redactor: TextRedactor, clean_terminal_noise: bool = False):
        self.redactor = redactor
        self.clean_terminal_noise = clean_terminal_noise
        self.repairs: Counter[str] = Counter()
        self.redactions: Counter[str] = Counter()

    def __call__(self, text: str) -> str:
        prepared = (clean_text(text, self.repairs) if self.clean_terminal_noise
                    else replace_lone_surrogates(text, self.repairs))
        redacted, findings = self.redactor.redact_text(prepared)
        for _, kind in findings:
            self.redactions[str(kind)] += 1
        return redacted
