"""The row schema: Harbor 0.26's columns in its order, the arrow types, the shard names and the
`huggingface` Features metadata that makes `datasets.load_dataset` read the rows as Harbor's."""
from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

MAIN_SOURCE = "main"  # trace_source of the main agent's rows

CONVERSATION_TYPE = pa.list_(pa.struct([
    pa.field("role", pa.string(), nullable=False),
    pa.field("content", pa.string(), nullable=False),
]))
SHAREGPT_TYPE = pa.list_(pa.struct([
    pa.field("from", pa.string(), nullable=False),
    pa.field("value", pa.string(), nullable=False),
]))
# Harbor 0.26's column order with every option on (tools in the first row, subagents present):
# ShareGPT, when asked for, comes before trace_source (see column_names).
TEXT_COLUMNS = ("agent", "model", "model_provider", "date", "task", "episode", "run_id", "trial_name",
                "tool_definitions", "result", "instruction", "verifier_output", "trace_source")
COLUMNS = ("conversations",) + TEXT_COLUMNS
SHAREGPT_COLUMN = "conversations_sharegpt"


def column_names(sharegpt: bool) -> list[str]:
    """The columns in file order: COLUMNS, with the ShareGPT column before `trace_source`."""
    names = list(COLUMNS)
    if sharegpt:
        names.insert(names.index("trace_source"), SHAREGPT_COLUMN)
    return names


# Shard names as Harbor's exporter (and `datasets.push_to_hub`) writes them.
SHARD_NAME = "train-{index:05d}-of-{count:05d}.parquet"


def _value() -> dict[str, str]:
    return {"dtype": "string", "_type": "Value"}


def hf_features(sharegpt: bool) -> dict[str, Any]:
    """The `datasets` Features of the rows, in the form every `datasets` version reads (a list of
    dicts is a list feature: `List` from datasets 4 on, a sequence of dicts before)."""
    turns = {"conversations": [{"role": _value(), "content": _value()}],
             SHAREGPT_COLUMN: [{"from": _value(), "value": _value()}]}
    return {name: turns.get(name) or _value() for name in column_names(sharegpt)}


def row_schema(sharegpt: bool = False) -> pa.Schema:
    """The arrow schema with the `huggingface` Features metadata in the footer, so that
    `datasets.load_dataset("parquet", ...)` gives the same Features as Harbor's export."""
    turns = {"conversations": CONVERSATION_TYPE, SHAREGPT_COLUMN: SHAREGPT_TYPE}
    fields = [pa.field(name, turns[name], nullable=False) if name in turns else pa.field(name, pa.string())
              for name in column_names(sharegpt)]
    metadata = json.dumps({"info": {"features": hf_features(sharegpt)}}, separators=(",", ":"))
    return pa.schema(fields, metadata={b"huggingface": metadata.encode()})
