"""Parquet shards: rows buffered into bounded row groups, `trials_per_shard` trials per shard, fixed
writer options (same input, same bytes), renamed to Harbor's `train-iiiii-of-nnnnn.parquet` at the end.

`tool_definitions` is written as JSON text during the pass; when trials had definitions, `finish`
rewrites each shard (one row group at a time) with the column as the list-of-structs type inferred
from the distinct definitions (schema.tool_definitions_type), so every shard has one schema."""
from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rlkeep.hashing import sha256_file
from rlkeep.traces.render import Conversation
from rlkeep.traces.render import sharegpt as to_sharegpt  # the option is called `sharegpt`
from rlkeep.traces.schema import (
    CONVERSATION_TYPE, SHAREGPT_COLUMN, SHAREGPT_TYPE, SHARD_NAME, TEXT_COLUMNS, TOOL_DEFINITIONS, row_schema,
    tool_definitions_type,
)

DEFAULT_TRIALS_PER_SHARD = 200
# A row group is flushed once its text reaches this many characters: memory stays bounded
# even with episodes=all, where one long trial yields O(turns^2) text.
ROW_GROUP_CHARS = 16 * 1024 * 1024

SCHEMA = row_schema()
# Short repeated values are dictionary encoded; long text is not (hashing it costs time, and
# the dictionary would overflow anyway).
DICTIONARY_COLUMNS = ["conversations.list.element.role", "agent", "model", "model_provider",
                      "task", "episode", "result"]
PARQUET_OPTIONS: dict[str, Any] = dict(
    compression="zstd", compression_level=3, use_dictionary=DICTIONARY_COLUMNS,
    write_statistics=True, version="2.6", data_page_version="1.0", write_page_index=False,
    store_schema=True, use_compliant_nested_type=True,
)


def _turns_array(conversations: list[Conversation], type_: pa.DataType) -> pa.Array:
    offsets = [0]
    keys: list[str] = []
    values: list[str] = []
    for conversation in conversations:
        for key, value in conversation:
            keys.append(key)
            values.append(value)
        offsets.append(len(keys))
    turns = pa.StructArray.from_arrays([pa.array(keys, pa.string()), pa.array(values, pa.string())],
                                       fields=list(type_.value_type))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), turns, type=type_)


class _RowBatch:
    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.sharegpt = SHAREGPT_COLUMN in schema.names
        self.conversations: list[Conversation] = []
        self.columns: dict[str, list[str | None]] = {name: [] for name in TEXT_COLUMNS}
        self.chars = 0

    def __len__(self) -> int:
        return len(self.conversations)

    def add(self, conversation: Conversation, columns: dict[str, str | None]) -> None:
        self.conversations.append(conversation)
        for name, values in self.columns.items():
            value = columns[name]
            values.append(value)
            if value:
                self.chars += len(value)
        self.chars += sum(len(content) for _, content in conversation) * (2 if self.sharegpt else 1)

    def table(self) -> pa.Table:
        arrays = []
        for name in self.schema.names:
            if name == "conversations":
                arrays.append(_turns_array(self.conversations, CONVERSATION_TYPE))
            elif name == SHAREGPT_COLUMN:
                arrays.append(_turns_array([to_sharegpt(c) for c in self.conversations], SHAREGPT_TYPE))
            else:
                arrays.append(pa.array(self.columns[name], pa.string()))
        return pa.Table.from_arrays(arrays, schema=self.schema)


class ShardWriter:
    """Writes rows into shards of `trials_per_shard` row-producing trials each, flushing a row
    group whenever the buffered text passes ROW_GROUP_CHARS. Shards are written under a part
    name and get their final `train-iiiii-of-nnnnn.parquet` names once the count is known."""

    def __init__(self, data_dir: Path, trials_per_shard: int, row_group_chars: int | None = None,
                 schema: pa.Schema = SCHEMA):
        self.data_dir = data_dir
        self.trials_per_shard = trials_per_shard
        self.row_group_chars = row_group_chars or ROW_GROUP_CHARS
        self.schema = schema
        self.shards: list[dict[str, Any]] = []
        self._parts: list[Path] = []
        self._writer: pq.ParquetWriter | None = None
        self._path: Path | None = None
        self._batch = _RowBatch(schema)
        self._shard_rows = 0
        self._shard_trials = 0
        self._definitions: dict[str, None] = {}  # distinct tool_definitions texts, in trial order
        self.tool_definitions: dict[str, Any] = {}  # how the column was stored (for the manifest)

    def _open(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._path = self.data_dir / f".part-{len(self.shards):05d}.parquet"
        self._writer = pq.ParquetWriter(self._path, self.schema, **PARQUET_OPTIONS)

    def _flush(self) -> None:
        if len(self._batch):
            if self._writer is None:
                self._open()
            assert self._writer is not None
            self._writer.write_table(self._batch.table())
            self._batch = _RowBatch(self.schema)

    def _close_shard(self) -> None:
        self._flush()
        if self._writer is None:
            return
        self._writer.close()
        assert self._path is not None
        self.shards.append({"name": self._path.name, "rows": self._shard_rows})
        self._parts.append(self._path)
        self._writer, self._path = None, None
        self._shard_rows = self._shard_trials = 0

    def add_trial(self, rows: Iterable[tuple[Conversation, dict[str, str | None]]]) -> int:
        count = 0
        for conversation, columns in rows:
            if columns[TOOL_DEFINITIONS] is not None:
                self._definitions.setdefault(columns[TOOL_DEFINITIONS])
            self._batch.add(conversation, columns)
            count += 1
            if self._batch.chars >= self.row_group_chars:
                self._flush()
        if count:
            self._shard_rows += count
            self._shard_trials += 1
            if self._shard_trials >= self.trials_per_shard:
                self._close_shard()
        return count

    def abort(self) -> None:
        """Close an open shard without recording it (the caller discards the directory)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def finish(self) -> list[dict[str, Any]]:
        self._close_shard()
        if not self.shards:  # no rows at all: one empty shard that still carries the schema
            self._open()
            self._close_shard()
            self.shards[-1]["rows"] = 0
        self._type_tool_definitions()
        count = len(self.shards)
        for index, (shard, part) in enumerate(zip(self.shards, self._parts)):
            shard["name"] = SHARD_NAME.format(index=index, count=count)
            final = self.data_dir / shard["name"]
            os.replace(part, final)
            shard.update(size=final.stat().st_size, sha256=sha256_file(final))
        return self.shards

    def _type_tool_definitions(self) -> None:
        texts = list(self._definitions)
        type_, why = tool_definitions_type([json.loads(text) for text in texts])
        self.tool_definitions = {"type": "json_text" if type_ is None else "list_of_structs",
                                 "distinct_definitions": len(texts), "why": why}
        if type_ is None:
            return
        schema = row_schema(SHAREGPT_COLUMN in self.schema.names, type_)
        for part in self._parts:
            retype_tool_definitions(part, schema)


def retype_tool_definitions(path: Path, schema: pa.Schema) -> None:
    """Rewrite a shard with `tool_definitions` parsed into the schema's type, row group by row
    group (the same groups, the same writer options)."""
    type_ = schema.field(TOOL_DEFINITIONS).type
    parsed: dict[str, Any] = {}
    typed = path.with_name(path.name + ".typed")
    source = pq.ParquetFile(path)
    with pq.ParquetWriter(typed, schema, **PARQUET_OPTIONS) as writer:
        for index in range(source.num_row_groups):
            table = source.read_row_group(index)
            texts = table.column(TOOL_DEFINITIONS).to_pylist()
            values = [None if text is None else parsed.setdefault(text, json.loads(text)) for text in texts]
            position = table.schema.get_field_index(TOOL_DEFINITIONS)
            table = table.set_column(position, schema.field(TOOL_DEFINITIONS), pa.array(values, type_))
            writer.write_table(table.cast(schema))
    os.replace(typed, path)
