"""Skimming JSON: decode only the members a step needs from a document that may be huge.

A Harbor result.json can carry hundreds of MB of rollout_details (token ids) or agent output
that no rlkeep step reads. `Skim.pick` walks the bytes (or an mmap) and decodes just the wanted
members, so memory stays at the size of what is picked, not several times the document.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

_JSON_WS = re.compile(rb"[ \t\r\n]*")
_JSON_STRUCTURE = re.compile(rb'[\[\]{}"]')
_JSON_SCALAR = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null|NaN|-?Infinity")
_CLOSER = {ord("{"): ord("}"), ord("["): ord("]")}


class SkimError(Exception):
    """Why a document cannot be skimmed: `reason` is a short tag, the message has the byte offset."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


class Skim:
    """Walks a JSON document without decoding values it does not need (rollout_details can
    be hundreds of MB of token ids). Works on bytes or an mmap. Skipped values are checked
    for balanced brackets and closed strings, not for full JSON syntax."""

    def __init__(self, data: Any) -> None:
        self.data = data
        self.size = len(data)

    def ws(self, pos: int) -> int:
        return _JSON_WS.match(self.data, pos).end()

    def byte(self, pos: int) -> int:
        if pos >= self.size:
            raise SkimError("truncated", f"document ends at byte {self.size}")
        return self.data[pos]

    def string_end(self, pos: int) -> int:
        data, probe = self.data, pos + 1
        while True:
            quote = data.find(b'"', probe)
            if quote < 0:
                raise SkimError("truncated", f"string opened at byte {pos} is never closed")
            backslash = quote - 1
            while data[backslash] == 0x5C:
                backslash -= 1
            if (quote - 1 - backslash) % 2 == 0:
                return quote + 1
            probe = quote + 1

    def value_end(self, pos: int) -> int:
        first = self.byte(pos)
        if first == 0x22:
            return self.string_end(pos)
        if first in _CLOSER:
            expected = [_CLOSER[first]]
            probe = pos + 1
            while expected:
                match = _JSON_STRUCTURE.search(self.data, probe)
                if match is None:
                    raise SkimError("truncated", f"value opened at byte {pos} is never closed")
                char = self.data[match.start()]
                if char == 0x22:
                    probe = self.string_end(match.start())
                    continue
                if char in _CLOSER:
                    expected.append(_CLOSER[char])
                elif char != expected.pop():
                    raise SkimError("invalid-json", f"mismatched bracket at byte {match.start()}")
                probe = match.end()
            return probe
        match = _JSON_SCALAR.match(self.data, pos)
        if match is None:
            raise SkimError("invalid-json", f"unexpected byte {chr(first)!r} at byte {pos}")
        return match.end()

    def decode(self, start: int, end: int) -> Any:
        try:
            return json.loads(self.data[start:end])
        except ValueError as error:
            raise SkimError("invalid-json", f"bytes {start}-{end}: {error}") from None

    def pick(self, pos: int, wanted: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
        """Decode the wanted members of the object at pos and skip the rest; a nested mapping
        in wanted picks inside that member, None decodes it whole. Returns (picked, end)."""
        picked: dict[str, Any] = {}
        pos = self.ws(pos)
        if self.byte(pos) != 0x7B:
            raise SkimError("not-an-object", f"expected an object at byte {pos}")
        pos = self.ws(pos + 1)
        if self.byte(pos) == 0x7D:
            return picked, pos + 1
        while True:
            if self.byte(pos) != 0x22:
                raise SkimError("invalid-json", f"expected a key at byte {pos}")
            key_end = self.string_end(pos)
            key = self.decode(pos, key_end)
            pos = self.ws(key_end)
            if self.byte(pos) != 0x3A:
                raise SkimError("invalid-json", f"expected ':' at byte {pos}")
            start = self.ws(pos + 1)
            inner = wanted.get(key, False)
            if inner is False:
                end = self.value_end(start)
            elif inner is not None and self.byte(start) == 0x7B:
                picked[key], end = self.pick(start, inner)
            else:
                end = self.value_end(start)
                picked[key] = self.decode(start, end)
            pos = self.ws(end)
            separator = self.byte(pos)
            if separator == 0x7D:
                return picked, pos + 1
            if separator != 0x2C:
                raise SkimError("invalid-json", f"expected ',' or '}}' at byte {pos}")
            pos = self.ws(pos + 1)


def pick_members(data: Any, wanted: Mapping[str, Any], what: str = "the document") -> dict[str, Any]:
    """The wanted members of the one top-level object in data (see Skim.pick); SkimError when
    data is empty, not an object, or has anything after the object."""
    skim = Skim(data)
    if skim.size == 0 or skim.ws(0) >= skim.size:
        raise SkimError("empty", f"{what} has no content")
    picked, end = skim.pick(0, wanted)
    end = skim.ws(end)
    if end != skim.size:
        raise SkimError("invalid-json", f"extra data after the object at byte {end}")
    return picked
