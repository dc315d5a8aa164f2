"""The WAL file codec (sparklog/format/wal.py; docs/storage.md, "The write-ahead log"):
round trips of open and closed files, the valid-prefix rule at every byte of a torn
last block, every CRC'd field's corruption refused by name, and a fuzz in which any
bytes decode or fail with CorruptWalError only."""

from __future__ import annotations

import random
import re
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparklog.errors import InvalidArgumentError
from sparklog.format.frame import crc32c, stamp
from sparklog.format.kafka_batch import KafkaRecord, encode_batch
from sparklog.format.wal import (
    BLOCK_HEADER_SIZE,
    FILE_HEADER_SIZE,
    TRAILER_SIZE,
    CorruptWalError,
    EntryFrames,
    WalFileEncoder,
    WalFileHeader,
    block_frames,
    parse_block,
    read_piece,
    read_wal_index,
    scan_wal,
    wal_file_name,
)
from sparklog.storage import open_fileio
from tests.support.logfiles import raw_frame

EPOCH = 7
TS = 1_700_000_000_000


def arrow(base: int, n: int = 1, epoch: int = EPOCH) -> bytes:
    """A stamped Arrow frame of ``n`` records at ``base``."""
    frame = bytearray(raw_frame([b"v%d" % (base + i) for i in range(n)],
                                timestamps=[TS + base + i for i in range(n)]))
    stamp(frame, 0, base, epoch)
    return bytes(frame)


def kafka(base: int, n: int = 1, epoch: int = EPOCH) -> bytes:
    """A stamped Kafka record batch (magic 2) of ``n`` records at ``base``."""
    frame = bytearray(encode_batch(
        [KafkaRecord(i, TS + base + i, b"k", b"kv%d" % (base + i)) for i in range(n)]))
    stamp(frame, 0, base, epoch)
    return bytes(frame)


def build(close: bool = True, last_small: bool = True):
    """A WAL file of three blocks (two partitions of topic ``t``, one of ``u``, both
    frame kinds; the last block one Kafka batch): (bytes, encoder, blocks)."""
    enc = WalFileEncoder(WalFileHeader(broker_id=3, incarnation=12, seq=41))
    data = bytearray(enc.header())
    blocks = []
    turns = [
        (5, [EntryFrames("t", 0, EPOCH, [arrow(0, 2), kafka(2)]),
             EntryFrames("u", 1, EPOCH, [kafka(10, 3)])]),
        (6, [EntryFrames("t", 1, EPOCH, [kafka(0) + kafka(1, 2)]),
             EntryFrames("t", 0, EPOCH, [arrow(3)])]),
        (9, [EntryFrames("t", 0, EPOCH, [kafka(4)] if last_small else [arrow(4)])]),
    ]
    for i, (turn, entries) in enumerate(turns):
        parts, block = enc.block(turn, TS + i, entries)
        for part in parts:
            data += part
        blocks.append(block)
    if close:
        data += enc.close()
    return bytes(data), enc, blocks


def test_round_trip_closed_file_through_scan_and_index(tmp_path):
    data, enc, blocks = build()
    scan = scan_wal(data, "f.wal")
    assert scan.header == WalFileHeader(3, 12, 41)
    assert scan.blocks == blocks and scan.error is None
    assert [b.turn for b in scan.blocks] == [5, 6, 9]
    assert [(e.topic, e.partition, e.base_offset, e.next_offset, e.frame_count)
            for e in scan.blocks[1].entries] == [("t", 1, 0, 3, 2), ("t", 0, 3, 4, 1)]
    assert scan.closed and scan.index == enc.index()
    assert list(scan.index) == [("t", 0), ("t", 1), ("u", 1)]
    assert [(p.base_offset, p.next_offset) for p in scan.index[("t", 0)]] == [
        (0, 3), (3, 4), (4, 5)]
    # the frames come back byte for byte, either kind
    frames = [(pos, f.header.base_offset, f.header.magic)
              for pos, f in block_frames(data, scan.blocks[0], scan.blocks[0].entries[0])]
    assert [f[1:] for f in frames] == [(0, 1), (2, 2)]
    first = scan.blocks[0].entries[0]
    assert data[first.position:first.position + first.size] == arrow(0, 2) + kafka(2)
    # a closed file through its trailer and index, then one piece by a positioned read
    path = str(tmp_path / wal_file_name(41))
    (tmp_path / wal_file_name(41)).write_bytes(data)
    fileio = open_fileio(str(tmp_path))
    index = read_wal_index(fileio, path)
    assert index == enc.index()
    piece = index[("u", 1)][0]
    got = read_piece(fileio, path, piece)
    assert [f.header.base_offset for f in got] == [10] and got[0].batch().num_rows == 3
    assert [f.header.next_offset for f in read_piece(fileio, path, index[("t", 1)][0])] \
        == [1, 3]


def test_open_file_is_read_sequentially_and_has_no_index(tmp_path):
    data, enc, blocks = build(close=False)
    scan = scan_wal(data)
    assert scan.blocks == blocks and scan.error is None and not scan.closed
    assert scan.valid_end == len(data)
    (tmp_path / "open.wal").write_bytes(data)
    with pytest.raises(CorruptWalError, match="no trailer"):
        read_wal_index(open_fileio(str(tmp_path)), str(tmp_path / "open.wal"))
    # an empty file (header only) holds no block
    header_only = scan_wal(WalFileHeader(1, 1, 1).to_bytes())
    assert header_only.blocks == [] and header_only.error is None


def test_torn_last_block_at_every_byte_gives_the_blocks_before_it():
    data, _, blocks = build(close=False)
    last = blocks[-1]
    assert last.size < 300  # one Kafka batch: every cut below is a full scan
    for cut in range(last.position + 1, last.end):
        scan = scan_wal(data[:cut])
        assert scan.blocks == blocks[:-1], cut
        assert scan.valid_end == last.position
        assert isinstance(scan.error, CorruptWalError) and "truncated" in str(scan.error), cut
    assert scan_wal(data[:last.position]).blocks == blocks[:-1]
    assert scan_wal(data[:last.position]).error is None


def test_torn_index_block_or_trailer_leaves_the_blocks():
    data, _, blocks = build()
    end = blocks[-1].end
    for cut in range(end + 1, len(data)):
        scan = scan_wal(data[:cut])
        assert scan.blocks == blocks and not scan.closed and scan.error is not None, cut


def _field_of(data: bytes, blocks, pos: int) -> str:
    """What a flip of byte ``pos`` of the closed file of build() must be refused as."""
    index_pos = struct.unpack_from(">q", data, len(data) - TRAILER_SIZE + 4)[0]
    if pos < 4:
        return "not a WAL file"
    if pos < 6:
        return "version"
    if pos < FILE_HEADER_SIZE:
        return "file header CRC32C mismatch"
    if pos >= len(data) - TRAILER_SIZE:
        return "trailer"
    if pos >= index_pos:
        return "no block here" if pos < index_pos + 4 else "index block CRC32C mismatch"
    block = next(b for b in blocks if b.position <= pos < b.end)
    rel = pos - block.position
    if rel < 4:
        return "no block here"
    if rel < BLOCK_HEADER_SIZE:
        return "block header CRC32C mismatch"
    first_frame = block.entries[0].position
    if pos < first_frame:
        return "entry table"  # its CRC, or a table that cannot be its own
    entry = next(e for e in block.entries if e.position <= pos < e.position + e.size)
    frame_pos = entry.position
    for _, frame in block_frames(data, block, entry):
        if frame_pos + frame.header.size > pos:
            break
        frame_pos += frame.header.size
    rel = pos - frame_pos
    if rel < 8:  # base offset, outside the frame's CRC
        return "base offset"
    if rel < 12:
        return "invalid frame length|truncated frame|CRC32C mismatch"
    if rel < 16:  # leader epoch, outside the frame's CRC
        return "leader epoch"
    if rel < 21:
        return "format version|CRC32C mismatch"
    return "CRC32C mismatch"


def test_every_crcd_field_corrupted_is_refused_by_name():
    data, _, blocks = build()
    failures = []
    for pos in range(len(data)):
        bad = bytearray(data)
        bad[pos] ^= 0x40
        expected = _field_of(data, blocks, pos)
        try:
            scan = scan_wal(bytes(bad), "f.wal")
            error = scan.error
            if error is None:
                failures.append((pos, expected, "accepted"))
                continue
            assert scan.blocks == [b for b in blocks if b.end <= error.position], pos
        except CorruptWalError as exc:
            error = exc
        if not re.search(expected, str(error)):
            failures.append((pos, expected, str(error)))
    assert not failures, failures[:5]


def test_trailer_and_index_corruption_refused_by_read_wal_index(tmp_path):
    data, _, _ = build()
    fileio = open_fileio(str(tmp_path))
    for pos, name in ((len(data) - 3, "trailer CRC32C mismatch"),
                      (len(data) - TRAILER_SIZE - 2, "index block CRC32C mismatch")):
        bad = bytearray(data)
        bad[pos] ^= 1
        (tmp_path / "x.wal").write_bytes(bytes(bad))
        with pytest.raises(CorruptWalError, match=name):
            read_wal_index(fileio, str(tmp_path / "x.wal"))


def test_a_piece_that_does_not_hold_its_frames_is_refused(tmp_path):
    data, enc, _ = build()
    (tmp_path / "x.wal").write_bytes(data)
    fileio = open_fileio(str(tmp_path))
    piece = enc.index()[("t", 0)][0]
    wrong = type(piece)(piece.position, piece.size, piece.base_offset, piece.next_offset + 1)
    with pytest.raises(CorruptWalError, match="frames end at offset 3, the table says 4"):
        read_piece(fileio, str(tmp_path / "x.wal"), wrong)


def test_encoder_refuses_bad_input_by_name():
    enc = WalFileEncoder(WalFileHeader(1, 1, 1))
    with pytest.raises(InvalidArgumentError, match="follows the file header"):
        enc.block(1, 0, [EntryFrames("t", 0, EPOCH, [arrow(0)])])
    enc.header()
    with pytest.raises(InvalidArgumentError, match="leader epoch 7, the entry's is 8"):
        enc.block(1, 0, [EntryFrames("t", 0, 8, [arrow(0)])])
    with pytest.raises(InvalidArgumentError, match="base offset 5 where offset 1"):
        enc.block(1, 0, [EntryFrames("t", 0, EPOCH, [arrow(0), kafka(5)])])
    with pytest.raises(InvalidArgumentError, match="no frames"):
        enc.block(1, 0, [EntryFrames("t", 0, EPOCH, [])])
    with pytest.raises(InvalidArgumentError, match="truncated frame"):
        enc.block(1, 0, [EntryFrames("t", 0, EPOCH, [arrow(0)[:-1]])])
    with pytest.raises(InvalidArgumentError, match="topic name"):
        enc.block(1, 0, [EntryFrames("", 0, EPOCH, [arrow(0)])])
    enc.block(4, 0, [EntryFrames("t", 0, EPOCH, [arrow(0)])])
    with pytest.raises(InvalidArgumentError, match="turn 4 after turn 4"):
        enc.block(4, 0, [EntryFrames("t", 0, EPOCH, [arrow(1)])])
    with pytest.raises(InvalidArgumentError, match="broker_id"):
        WalFileHeader(-1, 0, 0).to_bytes()


def test_a_block_whose_turn_does_not_grow_ends_the_valid_part():
    enc = WalFileEncoder(WalFileHeader(1, 1, 1))
    data = bytearray(enc.header())
    for turn, base in ((3, 0), (4, 1)):
        parts, _ = enc.block(turn, 0, [EntryFrames("t", 0, EPOCH, [kafka(base)])])
        data += b"".join(parts)
    second = len(data)
    # a copy of the first block after the second: a valid block of an older turn
    data += data[FILE_HEADER_SIZE:FILE_HEADER_SIZE + (second - FILE_HEADER_SIZE) // 2]
    scan = scan_wal(bytes(data))
    assert len(scan.blocks) == 2 and "turn 3 does not follow turn 4" in str(scan.error)


def _recrc(data: bytearray) -> None:
    """Redo every header, table, index and trailer CRC of a (mutated) WAL file, so that
    the mutation reaches the structural checks behind them."""
    struct.pack_into(">I", data, 28, crc32c(bytes(data[:28])))
    pos = FILE_HEADER_SIZE
    while pos + BLOCK_HEADER_SIZE <= len(data) and data[pos:pos + 4] == b"SLWB":
        length, count = struct.unpack_from(">I", data, pos + 4)[0], \
            struct.unpack_from(">i", data, pos + 24)[0]
        p = pos + BLOCK_HEADER_SIZE
        for _ in range(max(0, min(count, 64))):
            if p + 2 > len(data):
                break
            p += 2 + struct.unpack_from(">H", data, p)[0] + 32
        p = min(p, len(data))
        struct.pack_into(">I", data, pos + 28, crc32c(bytes(data[pos + BLOCK_HEADER_SIZE:p])))
        struct.pack_into(">I", data, pos + 32, crc32c(bytes(data[pos:pos + 32])))
        if length + 8 <= 0:
            break
        pos += length + 8
    if len(data) >= FILE_HEADER_SIZE + TRAILER_SIZE + 16:
        t = len(data) - TRAILER_SIZE
        index_pos = struct.unpack_from(">q", data, t + 4)[0]
        if FILE_HEADER_SIZE <= index_pos <= t - 16:
            struct.pack_into(">I", data, index_pos + 12, crc32c(bytes(data[index_pos + 16:t])))
            struct.pack_into(">I", data, t + 16, crc32c(bytes(data[index_pos:t])))
        struct.pack_into(">I", data, t + 20, crc32c(bytes(data[t:t + 20])))


def _decode_all(data: bytes, tmp_path) -> None:
    """Every reader of the codec on ``data``: each returns or raises CorruptWalError."""
    try:
        scan = scan_wal(data)
        for block in scan.blocks:
            for entry in block.entries:
                list(block_frames(data, block, entry))
    except CorruptWalError:
        pass
    try:
        parse_block(data, FILE_HEADER_SIZE)
    except CorruptWalError:
        pass
    path = tmp_path / "fuzz.wal"
    path.write_bytes(data)
    fileio = open_fileio(str(tmp_path))
    try:
        index = read_wal_index(fileio, str(path))
        for pieces in index.values():
            for piece in pieces:
                read_piece(fileio, str(path), piece)
    except CorruptWalError:
        pass


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), flips=st.integers(1, 8), recrc=st.booleans(),
       cut=st.integers(0, 100))
def test_fuzz_mutations_decode_or_fail_with_the_codecs_error(tmp_path, seed, flips, recrc,
                                                             cut):
    data, _, _ = build(last_small=True)
    rng = random.Random(seed)
    bad = bytearray(data)
    for _ in range(flips):
        pos = rng.randrange(len(bad))
        bad[pos] = rng.randrange(256)
    if cut:
        del bad[len(bad) - rng.randrange(min(cut, len(bad))):]
    if recrc:
        _recrc(bad)
    _decode_all(bytes(bad), tmp_path)


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=400))
def test_fuzz_random_bytes_after_a_header(tmp_path, body):
    data = bytearray(WalFileHeader(1, 2, 3).to_bytes() + body)
    _decode_all(bytes(data), tmp_path)
    _recrc(data)
    _decode_all(bytes(data), tmp_path)
    with pytest.raises(CorruptWalError):
        scan_wal(body[:FILE_HEADER_SIZE - 1])
