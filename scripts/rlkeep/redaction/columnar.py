"""Parquet and arrow files: every string cell (inside lists, structs, maps and dictionaries too) and
every key-value metadata entry of the schema and its fields is scanned; rewriting keeps the schema,
the row groups (parquet) or record batches (arrow) and the compression, with the cells redacted.

A finding's member is `column <dotted path>` or `metadata <key>`; its line is the cell's number in
that column, counted over the whole file (1-based)."""
from __future__ import annotations

from typing import TYPE_CHECKING, BinaryIO, Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from rlkeep.redaction.containers import member_path
from rlkeep.redaction.streams import Refused

if TYPE_CHECKING:
    from rlkeep.redaction.containers import Walker

_STRINGS = (pa.types.is_string, pa.types.is_large_string)


class _Cells:
    """Redacts the string cells of one file column by column, counting cells per column."""

    def __init__(self, walker: Walker, where: str, rewrite: bool) -> None:
        self.walker, self.where, self.rewrite = walker, where, rewrite
        self.seen: dict[str, int] = {}

    def strings(self, array: pa.Array, column: str) -> pa.Array:
        first = self.seen.get(column, 0)
        self.seen[column] = first + len(array)
        filled = pc.fill_null(array.cast(pa.large_string()), "")
        joined = pc.binary_join(pa.LargeListArray.from_arrays(pa.array([0, len(filled)], pa.int64()), filled), pa.scalar("\n", pa.large_string()))
        _, found = self.walker.redactor.redact_bytes(joined[0].as_buffer().to_pybytes())
        if not found:  # the usual case: one pass over the column's text, nothing per cell
            return array
        values = array.to_pylist()
        where = member_path(self.where, f"column {column}")
        for index, value in enumerate(values):
            if value is None:
                continue
            redacted, cell = self.walker.redactor.redact_text(value)
            self.walker.findings += [(where, first + index + 1, rule) for _, rule in cell]
            values[index] = redacted
        return pa.array(values, type=array.type) if self.rewrite else array

    def array(self, array: pa.Array, column: str) -> pa.Array:
        kind = array.type
        if any(test(kind) for test in _STRINGS):
            return self.strings(array, column)
        if pa.types.is_dictionary(kind):
            return pa.DictionaryArray.from_arrays(array.indices, self.array(array.dictionary, column))
        if pa.types.is_list(kind) or pa.types.is_large_list(kind):
            values = self.array(array.values, column)
            return type(array).from_arrays(array.offsets, values, mask=array.is_null() if array.null_count else None)
        if pa.types.is_map(kind):
            keys, items = self.array(array.keys, column + ".key"), self.array(array.items, column + ".value")
            return pa.MapArray.from_arrays(array.offsets, keys, items, mask=array.is_null() if array.null_count else None)
        if pa.types.is_struct(kind):
            fields = [self.array(array.field(i), f"{column}.{kind.field(i).name}") for i in range(kind.num_fields)]
            return pa.StructArray.from_arrays(fields, fields=list(kind), mask=array.is_null() if array.null_count else None)
        return array

    def batch(self, batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch | pa.Table:
        columns = []
        for name, column in zip(batch.schema.names, batch.columns):
            if isinstance(column, pa.ChunkedArray):
                column = pa.chunked_array([self.array(chunk, name) for chunk in column.chunks], column.type)
            else:
                column = self.array(column, name)
            columns.append(column)
        return type(batch).from_arrays(columns, schema=batch.schema)

    def metadata(self, metadata: dict[bytes, bytes] | None, scope: str) -> dict[bytes, bytes] | None:
        if not metadata:
            return metadata
        kept = {}
        for key, value in metadata.items():
            redacted, found = self.walker.redactor.redact_bytes(value)
            label = key.decode("utf-8", "replace")
            self.walker.findings += [(member_path(self.where, f"metadata {scope}{label}"), line, rule)
                                     for line, rule in found]
            kept[key] = redacted
        return kept

    def schema(self, schema: pa.Schema) -> pa.Schema:
        fields = [field.with_metadata(self.metadata(field.metadata, f"{field.name}: ")) if field.metadata else field
                  for field in schema]
        return pa.schema(fields, metadata=self.metadata(schema.metadata, ""))


def process_table(walker: Walker, what: str, stream: BinaryIO, where: str, out: BinaryIO | None) -> None:
    """Scan (out None) or rewrite a parquet or arrow file read from a seekable stream."""
    cells = _Cells(walker, where, out is not None)
    try:
        if what == "parquet":
            _parquet(cells, stream, out)
        else:
            _arrow(cells, stream, out)
    except (pa.ArrowException, OSError) as error:
        raise Refused(f"{what} file cannot be read ({error})") from None


def _parquet(cells: _Cells, stream: BinaryIO, out: BinaryIO | None) -> None:
    source = pq.ParquetFile(stream)
    schema = cells.schema(source.schema_arrow)
    codec = "none"
    if source.metadata.num_row_groups and source.metadata.num_columns:
        codec = source.metadata.row_group(0).column(0).compression.lower()
    writer = None if out is None else pq.ParquetWriter(out, schema, compression=codec)
    try:
        for index in range(source.num_row_groups):
            table = cells.batch(source.read_row_group(index))
            if writer is not None:
                writer.write_table(pa.Table.from_arrays(table.columns, schema=schema),
                                   row_group_size=max(1, table.num_rows))
    finally:
        if writer is not None:
            writer.close()


def _arrow(cells: _Cells, stream: BinaryIO, out: BinaryIO | None) -> None:
    head = stream.read(6)
    stream.seek(0)
    file_format = head == b"ARROW1"
    reader = ipc.open_file(stream) if file_format else ipc.open_stream(stream)
    schema = cells.schema(reader.schema)
    batches: Callable[[], object] = (
        (lambda: (reader.get_batch(i) for i in range(reader.num_record_batches))) if file_format
        else (lambda: iter(reader)))
    writer = None if out is None else (ipc.new_file if file_format else ipc.new_stream)(out, schema)
    try:
        for batch in batches():  # type: ignore[attr-defined]
            redacted = cells.batch(batch)
            if writer is not None:
                writer.write_batch(pa.RecordBatch.from_arrays(redacted.columns, schema=schema))
    finally:
        if writer is not None:
            writer.close()
