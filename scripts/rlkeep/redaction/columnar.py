"""Parquet and arrow files: every string cell (inside lists, structs, maps and dictionaries too) and
every key-value metadata entry of the schema and its fields is scanned; rewriting keeps the schema,
the row groups (parquet) or record batches (arrow) and the compression, with the cells redacted.

A finding's member is `column <dotted path>` or `metadata <key>`; its line is the cell's number in
that column, counted over the whole file (1-based)."""
from __future__ import annotations

from typing import BinaryIO, Callable, Iterator, TypeVar

import numpy
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from rlkeep.redaction.common import member_path
from rlkeep.redaction.engine import Redactor
from rlkeep.redaction.spans import Span, merge_spans, replace_spans
from rlkeep.redaction.streams import Refused

T = TypeVar("T")
_STRINGS = (pa.types.is_string, pa.types.is_large_string)
AHEAD_BYTES = 64 << 10  # how far into the batch before and after a secret in this one may reach


def _filled(array: pa.Array) -> pa.Array:
    return pc.fill_null(array.cast(pa.large_string()), "")


def _head(array: pa.Array, reverse: bool = False) -> pa.Array:
    """The first (last) cells of a batch, up to AHEAD_BYTES of text."""
    filled = _filled(array)
    lengths = pc.binary_length(filled).to_numpy(zero_copy_only=False) + 1
    count = int(numpy.searchsorted(numpy.cumsum(lengths[::-1] if reverse else lengths), AHEAD_BYTES)) + 1
    return filled.slice(max(0, len(filled) - count), count) if reverse else filled.slice(0, count)


def _joined(filled: pa.Array) -> bytes:
    """The cells, one per line."""
    offsets = pa.array([0, len(filled)], pa.int64())
    return pc.binary_join(pa.LargeListArray.from_arrays(offsets, filled), pa.scalar("\n", pa.large_string()))[0].as_buffer().to_pybytes()


class _Cells:
    """Redacts the string cells of one file column by column, counting cells per column."""

    def __init__(self, redactor: Redactor, findings: list[tuple[str, int, str]], where: str, rewrite: bool) -> None:
        self.redactor, self.findings, self.where, self.rewrite = redactor, findings, where, rewrite
        self.seen: dict[str, int] = {}
        self.before: dict[str, pa.Array] = {}  # each string column's last cells before this batch, as read

    def strings(self, array: pa.Array, column: str, ahead: pa.Array | None = None) -> pa.Array:
        """The column's cells as lines of one text, between the last cells of the batch before
        and the first of the next (`ahead`): a secret a writer spread over consecutive rows (a
        log table, one line per row) is found as a wrapped one is, and each row's piece goes,
        whichever batch it is in."""
        first = self.seen.get(column, 0)
        self.seen[column] = first + len(array)
        before = self.before.get(column)
        self.before[column] = _head(array if before is None else pa.concat_arrays([before, _filled(array)]),
                                    reverse=True)
        parts = [before, _filled(array),
                 _head(ahead) if ahead is not None and len(ahead) else None]
        texts = [b"" if part is None else _joined(part) for part in parts]
        context = len(texts[0]) + 1 if parts[0] is not None else 0
        text = b"\n".join(texts[index] for index in range(3) if parts[index] is not None)
        spans = [span for span in self.redactor.spans(text, context + len(texts[1]))
                 if span[1] > context]
        if not spans:  # the usual case: one pass over the column's text, nothing per cell
            return array
        pieces: dict[int, list[Span]] = {}
        cell_start = context
        for index, length in enumerate(pc.binary_length(parts[1]).to_numpy(zero_copy_only=False).tolist()):
            cell_end = cell_start + length
            for low, high, kind in spans:
                if low < cell_end and high > cell_start:
                    pieces.setdefault(index, []).append(
                        Span(max(low, cell_start) - cell_start, min(high, cell_end) - cell_start, 0, kind))
            cell_start = cell_end + 1
        values = array.to_pylist()
        where = member_path(self.where, f"column {column}")
        for index, value in enumerate(values):
            if value is None:
                continue
            marked = value.encode("utf-8", "surrogatepass")
            found = merge_spans(pieces.get(index, []))
            if found:
                marked, _ = replace_spans(marked, found)
                self.findings += [(where, first + index + 1, kind) for kind in dict.fromkeys(s.kind for s in found)]
            redacted, cell = self.redactor.redact_bytes(marked)
            self.findings += [(where, first + index + 1, rule) for _, rule in cell]
            values[index] = redacted.decode("utf-8", "surrogatepass")
        return pa.array(values, type=array.type) if self.rewrite else array

    def array(self, array: pa.Array, column: str, ahead: pa.Array | None = None) -> pa.Array:
        kind = array.type
        if any(test(kind) for test in _STRINGS):
            return self.strings(array, column, ahead)
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

    def batch(self, batch: pa.RecordBatch | pa.Table,
              following: pa.RecordBatch | pa.Table | None = None) -> pa.RecordBatch | pa.Table:
        """One batch (a row group), with the next one to look ahead into."""
        columns = []
        for number, (name, column) in enumerate(zip(batch.schema.names, batch.columns)):
            chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
            ahead = [] if following is None else _chunks(following.column(number))
            done = [self.array(chunk, name, (chunks + ahead)[index + 1] if index + 1 < len(chunks + ahead) else None)
                    for index, chunk in enumerate(chunks)]
            columns.append(pa.chunked_array(done, column.type) if isinstance(column, pa.ChunkedArray) else done[0])
        return type(batch).from_arrays(columns, schema=batch.schema)

    def metadata(self, metadata: dict[bytes, bytes] | None, scope: str) -> dict[bytes, bytes] | None:
        if not metadata:
            return metadata
        kept = {}
        for key, value in metadata.items():
            redacted, found = self.redactor.redact_bytes(value)
            label = key.decode("utf-8", "replace")
            self.findings += [(member_path(self.where, f"metadata {scope}{label}"), line, rule)
                                     for line, rule in found]
            kept[key] = redacted
        return kept

    def schema(self, schema: pa.Schema) -> pa.Schema:
        fields = [field.with_metadata(self.metadata(field.metadata, f"{field.name}: ")) if field.metadata else field
                  for field in schema]
        return pa.schema(fields, metadata=self.metadata(schema.metadata, ""))


def _chunks(column: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return list(column.chunks) if isinstance(column, pa.ChunkedArray) else [column]


def _with_next(items: Iterator[T]) -> Iterator[tuple[T, T | None]]:
    """Each item with the one after it (None after the last)."""
    previous: list[T] = []
    for item in items:
        if previous:
            yield previous[0], item
        previous = [item]
    if previous:
        yield previous[0], None


def process_table(redactor: Redactor, findings: list[tuple[str, int, str]], what: str, stream: BinaryIO,
                  where: str, out: BinaryIO | None) -> None:
    """Scan (out None) or rewrite a parquet or arrow file read from a seekable stream; each finding
    (member, line, kind) is added to `findings`. Called by rlkeep.redaction.containers, which it
    never imports."""
    cells = _Cells(redactor, findings, where, out is not None)
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
        groups = (source.read_row_group(index) for index in range(source.num_row_groups))
        for group, following in _with_next(groups):
            table = cells.batch(group, following)
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
        for batch, following in _with_next(batches()):  # type: ignore[arg-type]
            redacted = cells.batch(batch, following)
            if writer is not None:
                writer.write_batch(pa.RecordBatch.from_arrays(redacted.columns, schema=schema))
    finally:
        if writer is not None:
            writer.close()
