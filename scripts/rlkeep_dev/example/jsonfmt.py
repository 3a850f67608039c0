"""Harbor's ATIF JSON style: indent 2 with numeric arrays kept on one line."""
from __future__ import annotations

import json
from typing import Any


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def dumps_atif(value: Any, level: int = 0) -> str:
    pad, inner = "  " * level, "  " * (level + 1)
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [f"{inner}{json.dumps(key)}: {dumps_atif(item, level + 1)}" for key, item in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list):
        if not value:
            return "[]"
        if all(_is_number(item) for item in value):
            return "[" + ", ".join(json.dumps(item) for item in value) + "]"
        items = [inner + dumps_atif(item, level + 1) for item in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(value, ensure_ascii=False)
