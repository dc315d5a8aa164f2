"""The golden WAL file and shared segment (``wide/``, written once by
``make_golden.py --wide`` and committed): their bytes decode to the values stated here
(docs/storage.md, sections 4 and 5), field by field at the documented positions, and
the codecs write the same bytes again from the same input. A change of either format
fails them: change it only on purpose, with docs/storage.md and these values."""

from __future__ import annotations

import struct
from pathlib import Path

from sparklog.format.frame import crc32c
from sparklog.format.wal import (
    WalBlock,
    WalEntry,
    WalFileHeader,
    WalPiece,
    read_piece,
    read_wal_index,
    scan_wal,
)
from sparklog.log.shared_segment import SOURCE_WAL, PlacedRun, Source, open_shared_segment, read_run
from sparklog.storage import open_fileio
from tests.golden.make_golden import wide_segment_bytes, wide_wal_bytes

WIDE = Path(__file__).resolve().parent / "wide"
WAL = WIDE / "00000000000000000041.wal"
SEG = WIDE / "L0-00003-00000000000000000012-0000000041.seg"
TS = 1_700_000_000_000

BLOCKS = [
    WalBlock(32, 1408, 1, TS, (
        WalEntry("raw", 0, 7, 0, 5, 143, 1206, 2),
        WalEntry("wide", 1, 7, 20, 22, 1349, 91, 1))),
    WalBlock(1440, 148, 2, TS + 5, (WalEntry("raw", 0, 7, 5, 6, 1513, 75, 1),)),
]
INDEX = {("raw", 0): [WalPiece(143, 1206, 0, 5), WalPiece(1513, 75, 5, 6)],
         ("wide", 1): [WalPiece(1349, 91, 20, 22)]}


def test_wal_file_fields_at_their_positions():
    data = WAL.read_bytes()
    assert len(data) == 1739
    # file header: magic, version, flags, broker id, incarnation, seq, CRC of [0, 28)
    assert struct.unpack_from(">4sHHiqqI", data, 0) == (
        b"SLWL", 1, 0, 3, 12, 41, crc32c(data[:28]))
    # first block header: magic, length, turn, append time, entries, table CRC, CRC
    magic, length, turn, append, count, table_crc, head_crc = struct.unpack_from(
        ">4sIqqiII", data, 32)
    assert (magic, length + 8, turn, append, count) == (b"SLWB", 1408, 1, TS, 2)
    assert head_crc == crc32c(data[32:64])
    # its first entry: topic "raw", partition 0, epoch 7, offsets [0, 5), 1206 bytes,
    # 2 frames; the table ends where the frames begin (143)
    assert struct.unpack_from(">H3siiqqII", data, 68) == (3, b"raw", 0, 7, 0, 5, 1206, 2)
    assert table_crc == crc32c(data[68:143])
    # the frames: an Arrow frame (magic 1) of 3 records then a Kafka batch (magic 2)
    assert (data[143 + 16], struct.unpack_from(">q", data, 143)[0]) == (1, 0)
    arrow_size = struct.unpack_from(">i", data, 143 + 8)[0] + 12
    assert (data[143 + arrow_size + 16],
            struct.unpack_from(">q", data, 143 + arrow_size)[0]) == (2, 3)
    # trailer: magic, index block position and size, its CRC, CRC of [0, 20)
    magic, index_pos, index_len, index_crc, crc = struct.unpack_from(">4sqIII", data,
                                                                      len(data) - 24)
    assert (magic, index_pos, index_len) == (b"SLWT", 1588, 127)
    assert index_crc == crc32c(data[1588:1715]) and crc == crc32c(data[-24:-4])
    assert struct.unpack_from(">4sII", data, 1588) == (b"SLWI", 119, 2)


def test_wal_file_decodes_to_the_stated_blocks_and_index(tmp_path):
    data = WAL.read_bytes()
    scan = scan_wal(data, str(WAL))
    assert scan.header == WalFileHeader(3, 12, 41)
    assert scan.blocks == BLOCKS and scan.error is None
    assert scan.index == INDEX
    fileio = open_fileio(str(WIDE))
    assert read_wal_index(fileio, str(WAL)) == INDEX
    frames = read_piece(fileio, str(WAL), INDEX[("raw", 0)][0])
    assert [(f.header.magic, f.header.base_offset, f.header.leader_epoch) for f in frames] \
        == [(1, 0, 7), (2, 3, 7)]
    assert frames[0].batch().column("value").to_pylist() == [b"wide-0", b"wide-1", b"wide-2"]
    assert frames[1].batch().column("value").to_pylist() == [b"wide-3", b"wide-4"]
    assert frames[1].header.producer_id == 4242


def test_shared_segment_fields_and_runs():
    data = SEG.read_bytes()
    assert len(data) == 1727
    t = len(data) - 40
    assert struct.unpack_from(">4sHHqIIqII", data, t) == (
        b"SLSS", 1, 0, 1372, t - 1372, crc32c(data[1372:t]), 1, 0, crc32c(data[t:t + 36]))
    seg = open_shared_segment(open_fileio(str(WIDE)), str(SEG))
    assert seg.level == 0 and seg.footer_position == 1372
    assert seg.sources == (Source(SOURCE_WAL, "00000000000000000041.wal"),)
    assert seg.placed == (PlacedRun("hot", 0, 0, 1000),)
    raw, wide = seg.runs
    assert (raw.topic, raw.partition, raw.base_offset, raw.next_offset, raw.position,
            raw.size, raw.max_timestamp, raw.max_timestamp_offset, raw.record_count,
            raw.frame_count, raw.no_control) == (
        "raw", 0, 0, 6, 0, 1281, TS + 50, 5, 6, 3, True)
    assert raw.offset_index.entries() == [(3, 1117), (5, 1206)]
    assert raw.time_index.entries() == [(TS + 20, 3), (TS + 40, 5)]
    assert (wide.topic, wide.partition, wide.base_offset, wide.next_offset, wide.position,
            wide.size) == ("wide", 1, 20, 22, 1281, 91)
    # the footer's topic table: "hot" (no run, placed), "raw" (run 0), "wide" (run 1)
    assert struct.unpack_from(">IH3sII", data, 1372) == (3, 3, b"hot", 0, 0)
    frames = list(read_run(open_fileio(str(WIDE)), seg, raw, 4))
    assert [f.header.base_offset for f in frames] == [3, 5]


def test_the_codecs_write_the_same_bytes_again():
    assert wide_wal_bytes() == WAL.read_bytes()
    assert wide_segment_bytes() == SEG.read_bytes()
