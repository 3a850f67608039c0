"""The row schema: Harbor 0.26's columns in its order, the arrow types, the shard names and the
`huggingface` Features metadata that makes `datasets.load_dataset` read the rows as Harbor's.

`tool_definitions` has no fixed type in Harbor's output: `Dataset.from_list` infers it from the
values, a list of structs whose fields are the union of the keys seen (pyarrow's inference, which
`datasets` uses). rlkeep pins it the same way from the distinct definitions in trial order
(`tool_definitions_type`), so the Features equal Harbor's for the same trials."""
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


TOOL_DEFINITIONS = "tool_definitions"
# `datasets` dtype names of the arrow types JSON values are inferred as.
_DTYPES = {pa.string(): "string", pa.large_string(): "large_string", pa.int64(): "int64",
           pa.float64(): "float64", pa.bool_(): "bool", pa.null(): "null"}


def feature_of(type_: pa.DataType) -> Any:
    """The `datasets` feature of an arrow type, in the form every `datasets` version reads: a
    struct is a dict of features, a list is `[feature]` (`List` from datasets 4 on)."""
    if pa.types.is_struct(type_):
        return {field.name: feature_of(field.type) for field in type_}
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        return [feature_of(type_.value_type)]
    if type_ not in _DTYPES:
        raise ValueError(f"no datasets feature for arrow type {type_}")
    return {"dtype": _DTYPES[type_], "_type": "Value"}


def hf_features(sharegpt: bool, tool_definitions: pa.DataType | None = None) -> dict[str, Any]:
    """The `datasets` Features of the rows (see feature_of for the form)."""
    types = {"conversations": CONVERSATION_TYPE, SHAREGPT_COLUMN: SHAREGPT_TYPE,
             TOOL_DEFINITIONS: tool_definitions or pa.string()}
    return {name: feature_of(types.get(name, pa.string())) for name in column_names(sharegpt)}


def row_schema(sharegpt: bool = False, tool_definitions: pa.DataType | None = None) -> pa.Schema:
    """The arrow schema with the `huggingface` Features metadata in the footer, so that
    `datasets.load_dataset("parquet", ...)` gives the same Features as Harbor's export.
    `tool_definitions`: the column's type (tool_definitions_type); None keeps it JSON text."""
    turns = {"conversations": CONVERSATION_TYPE, SHAREGPT_COLUMN: SHAREGPT_TYPE}
    fields = [pa.field(name, turns[name], nullable=False) if name in turns
              else pa.field(name, tool_definitions or pa.string()) if name == TOOL_DEFINITIONS
              else pa.field(name, pa.string()) for name in column_names(sharegpt)]
    metadata = json.dumps({"info": {"features": hf_features(sharegpt, tool_definitions)}}, separators=(",", ":"))
    return pa.schema(fields, metadata={b"huggingface": metadata.encode()})


def _has_empty_struct(type_: pa.DataType) -> bool:
    if pa.types.is_struct(type_):
        return type_.num_fields == 0 or any(_has_empty_struct(field.type) for field in type_)
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        return _has_empty_struct(type_.value_type)
    return False


def tool_definitions_type(definitions: list[Any]) -> tuple[pa.DataType | None, str]:
    """(type, why) of the tool_definitions column for these distinct definitions lists, in trial
    order: what `datasets` infers from the same values, or None (the column stays JSON text) when
    there are none, when the values cannot share one type (Harbor's `from_list` fails there too),
    or when the type holds a struct without fields, which parquet cannot store."""
    if not definitions:
        return None, "no trial has tool definitions"
    try:
        inferred = pa.array(definitions).type
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        return None, f"the definitions do not share one type ({error}); kept as JSON text"
    if _has_empty_struct(inferred):
        return None, "the inferred type has a struct without fields, which parquet cannot store; kept as JSON text"
    try:
        feature_of(inferred)
    except ValueError as error:
        return None, f"{error}; kept as JSON text"
    return inferred, "list of structs inferred from the distinct definitions, as datasets infers Harbor's column"
