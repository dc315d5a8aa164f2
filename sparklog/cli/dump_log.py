"""``sparklog dump-log PATH`` (Kafka's kafka-dump-log.sh): print the frames of a segment.

PATH is a segment ``.log``, its ``.index`` or ``.timeindex``, or a partition directory
(every segment in offset order), as a local path or a storage URL; several go
comma-separated in ``--files`` (kafka-dump-log's form). Each frame prints
its header (offsets, count, timestamps, producer id/epoch/sequence, leader epoch,
position, size, codec, CRC valid or not); ``--deep-iteration`` adds one line per record
and ``--print-data-log`` adds the keys and values. The command exits with status 1 at
the first corrupt or incomplete frame, naming its position and the reason.

Examples::

    sparklog dump-log /data/log/topics/events/0/00000000000000000000.log
    sparklog dump-log --print-data-log hdfs://nn:8020/sparklog/topics/events/0
    sparklog dump-log --files 00000000000000000000.log,00000000000000000000.index
"""

from __future__ import annotations

import json
import sys

import pyarrow as pa

from ..errors import (
    CorruptRecordError,
    InvalidArgumentError,
    SparklogError,
    StorageError,
    StorageFileNotFoundError,
)
from ..format.frame import RESERVED_COLUMNS, TIMESTAMP_COLUMN, Frame
from ..format.header import HEADER_SIZE, unpack_header
from ..log.index import OffsetIndex, TimeIndex
from ..log.layout import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, PartitionListing
from ..log.scan import FrameScan
from ..storage import open_fileio

_TS_TYPES = ("CreateTime", "LogAppendTime")


def add_parser(subparsers) -> None:
    """Register ``dump-log``."""
    parser = subparsers.add_parser(
        "dump-log", help="print the frames of a segment file, index or partition directory",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("path", metavar="PATH", nargs="?",
                        help="a .log, .index or .timeindex file or a partition directory "
                             "(local path or storage URL)")
    parser.add_argument("--files", metavar="PATH[,PATH...]",
                        help="comma-separated paths to dump (as kafka-dump-log --files)")
    parser.add_argument("--deep-iteration", action="store_true",
                        help="print every record, not only the frame headers")
    parser.add_argument("--print-data-log", action="store_true",
                        help="print record keys and values (implies --deep-iteration)")
    parser.set_defaults(func=run)


def _bool(value: bool) -> str:
    return "true" if value else "false"


def frame_line(position: int, frame_or_header, valid: bool = True) -> str:
    """The one-line description of a frame (kafka-dump-log's batch line)."""
    h = frame_or_header.header if isinstance(frame_or_header, Frame) else frame_or_header
    last_seq = h.base_sequence + h.last_offset_delta if h.base_sequence >= 0 else -1
    return (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
            f"firstTimestamp: {h.first_timestamp} maxTimestamp: {h.max_timestamp} "
            f"timestampType: {_TS_TYPES[h.timestamp_type]} producerId: {h.producer_id} "
            f"producerEpoch: {h.producer_epoch} baseSequence: {h.base_sequence} "
            f"lastSequence: {last_seq} partitionLeaderEpoch: {h.leader_epoch} "
            f"isTransactional: {_bool(bool(h.attributes & 0x10))} isControl: {_bool(h.is_control)} "
            f"position: {position} size: {h.size} magic: {h.magic} compresscodec: {h.codec} "
            f"crc: {h.crc:#010x} isvalid: {_bool(valid)}")


def _text(value) -> str:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    return str(value)


def record_lines(frame: Frame, print_data: bool) -> list[str]:
    """One ``| offset: ...`` line per record of ``frame``."""
    h = frame.header
    batch = frame.batch()
    offsets = frame.offsets().to_pylist()
    times = batch.column(batch.schema.get_field_index(TIMESTAMP_COLUMN)).cast(pa.int64())
    times = [h.max_timestamp] * len(offsets) if h.log_append_time else times.to_pylist()
    names = [n for n in batch.schema.names if n not in RESERVED_COLUMNS]
    rows = batch.select(names).to_pylist()
    raw = names == ["key", "value", "headers"]
    lines = []
    for offset, ts, row in zip(offsets, times, rows):
        line = f"| offset: {offset} {_TS_TYPES[h.timestamp_type]}: {ts}"
        if raw:
            key, value, headers = row["key"], row["value"], row["headers"] or []
            line += (f" keySize: {-1 if key is None else len(key)} "
                     f"valueSize: {-1 if value is None else len(value)} "
                     f"headerKeys: [{','.join(hd['key'] for hd in headers)}]")
            if print_data:
                line += (f" key: {'null' if key is None else _text(key)} "
                         f"payload: {'null' if value is None else _text(value)}")
        elif print_data:
            line += " record: " + json.dumps(row, default=_text, sort_keys=True)
        lines.append(line)
    return lines


def dump_segment(fileio, path: str, deep: bool, print_data: bool, out, err) -> int:
    """Print every frame of segment ``path``; 1 at the first bad frame, else 0."""
    print(f"Dumping {path}", file=out)
    frames = records = 0
    scan = FrameScan(fileio, path)
    error = None
    for position, frame in scan:
        print(frame_line(position, frame), file=out)
        frames += 1
        records += frame.header.record_count
        if deep:
            try:
                lines = record_lines(frame, print_data)
            except CorruptRecordError as exc:  # CRC fine but the Arrow body is not
                error = CorruptRecordError(f"frame at position {position} of {path}: {exc}",
                                           path=path, position=position)
                break
            for line in lines:
                print(line, file=out)
    error = error or scan.error
    if error is None:
        print(f"{frames} frames, {records} records, {scan.valid_end} bytes: all valid", file=out)
        return 0
    head = fileio.read_range(path, error.position, HEADER_SIZE)
    if len(head) == HEADER_SIZE and "CRC32C" in str(error):
        print(frame_line(error.position, unpack_header(head), valid=False), file=out)
    print(f"sparklog dump-log: {error}", file=err)
    return 1


def dump_index(fileio, path: str, out) -> int:
    """Print an ``.index`` (summary and entries) or a ``.timeindex`` (entries)."""
    print(f"Dumping {path}", file=out)
    data = fileio.read_all(path)
    if path.endswith(TIMEINDEX_SUFFIX):
        for ts, offset in TimeIndex.from_bytes(data, path).entries():
            print(f"timestamp: {ts} offset: {offset}", file=out)
        return 0
    summary, index = OffsetIndex.from_bytes(data, path)
    print(f"baseOffset: {summary.base_offset} nextOffset: {summary.next_offset} "
          f"size: {summary.size} maxTimestamp: {summary.max_timestamp} "
          f"maxTimestampOffset: {summary.max_timestamp_offset} records: {summary.record_count} "
          f"frames: {summary.frame_count} noControl: {str(summary.no_control).lower()}",
          file=out)
    for offset, position in index.entries():
        print(f"offset: {offset} position: {position}", file=out)
    return 0


def run(args, out=None, err=None) -> int:
    """Dump ``args.path`` and every path of ``args.files``; 0 if everything read was
    valid, 1 otherwise."""
    paths = ([args.path] if args.path else []) + \
        [p.strip() for p in (getattr(args, "files", None) or "").split(",") if p.strip()]
    if not paths:
        raise InvalidArgumentError("dump-log: give PATH or --files PATH[,PATH...]")
    status = 0
    for path in paths:
        status |= dump_path(args, path, out or sys.stdout, err or sys.stderr)
    return status


def dump_path(args, path: str, out, err) -> int:
    """Dump one path (see the module docstring); 0 if valid, 1 otherwise."""
    path = path.rstrip("/") or path
    fileio = open_fileio(path)
    deep = args.deep_iteration or args.print_data_log
    try:
        if path.endswith((INDEX_SUFFIX, TIMEINDEX_SUFFIX)):
            return dump_index(fileio, path, out)
        if path.endswith(LOG_SUFFIX):
            return dump_segment(fileio, path, deep, args.print_data_log, out, err)
        if not fileio.exists(path):
            raise StorageFileNotFoundError(f"{path}: does not exist")
        try:
            segments = PartitionListing.scan(fileio, path).logs()
        except StorageError:  # a file with another name: dump it as a segment
            return dump_segment(fileio, path, deep, args.print_data_log, out, err)
        if not segments:
            raise StorageFileNotFoundError(f"{path}: no segment files (*.log) in this directory")
        status = 0
        for files in segments:
            status |= dump_segment(fileio, files.log_file.path, deep, args.print_data_log, out, err)
        return status
    except SparklogError as exc:
        print(f"sparklog dump-log: {exc}", file=err)
        return 1
