"""The broker's tail cache: fetches of the newest frames answered from memory, only
while what it holds is exactly the active segment's tail."""

from sparklog.server.tail import TailCache


def test_a_fetch_at_a_run_gets_it_and_the_runs_after_it_that_fit():
    tail = TailCache()
    tail.add(0, 10, b"a" * 100, 0)
    tail.add(10, 12, b"b" * 50, 0)
    tail.add(12, 20, b"c" * 70, 0)
    assert tail.read(10, 1000, 0) == b"b" * 50 + b"c" * 70
    assert tail.read(0, 160, 0) == b"a" * 100 + b"b" * 50  # the third does not fit
    assert tail.read(12, 70, 0) == b"c" * 70


def test_offsets_it_cannot_answer_exactly_go_to_storage():
    tail = TailCache()
    tail.add(5, 10, b"a" * 100, 0)
    assert tail.read(7, 1000, 0) is None     # inside a run: the log returns whole frames
    assert tail.read(10, 1000, 0) is None    # the high watermark: nothing to read
    assert tail.read(4, 1000, 0) is None     # before the runs kept
    assert tail.read(5, 99, 0) is None       # the first run is larger than the limit
    assert tail.read(5, 1000, 40) is None    # the segment rolled since


def test_only_consecutive_runs_of_one_segment_are_kept():
    tail = TailCache()
    tail.add(0, 10, b"a", 0)
    tail.add(11, 12, b"b", 0)       # a gap: the older runs are dropped
    assert tail.read(0, 100, 0) is None and tail.read(11, 100, 0) == b"b"
    tail.add(12, 13, b"c", 12)      # a new segment: the same
    assert tail.read(11, 100, 12) is None and tail.read(12, 100, 12) == b"c"
    tail.add(13, 20, None, 12)      # appended but too large to keep: nothing is kept
    assert len(tail) == 0 and tail.read(12, 100, 12) is None
    tail.add(20, 21, b"d", 12)
    assert tail.read(20, 100, 12) == b"d"


def test_bounded_in_bytes_and_runs_oldest_dropped_first():
    tail = TailCache(max_bytes=250, max_run=100, max_runs=3)
    for i in range(4):
        tail.add(i, i + 1, bytes([65 + i]) * 80, 0)
    assert len(tail) == 3 and tail.read(0, 1000, 0) is None
    assert tail.read(1, 1000, 0) == b"B" * 80 + b"C" * 80 + b"D" * 80
    tail.add(4, 5, b"E" * 120, 0)   # over max_run: not kept, and the rest goes
    assert len(tail) == 0
    tail.add(5, 6, b"F" * 100, 0)
    tail.add(6, 7, b"G" * 100, 0)
    tail.add(7, 8, b"H" * 100, 0)   # 300 bytes > 250: the oldest goes
    assert tail.read(5, 1000, 0) is None and tail.read(6, 1000, 0) == b"G" * 100 + b"H" * 100


def test_long_polls_following_the_tail_get_every_append_across_rolls(broker):
    """A consumer's long poll waits at the high watermark and is answered with exactly
    the frames the next append wrote (from the tail cache), through segment rolls and
    acks=1 and acks=all appends alike; a fetch inside a run of frames gets the log's
    answer (whole frames from the one holding the offset)."""
    import threading

    from sparklog.format.frame import iter_frames
    from sparklog.protocol import Connection
    from tests.support.wire import create, fetch, frame_of, produce

    topic = "tail-follow"
    with Connection(broker.address) as conn, Connection(broker.address) as reader:
        assert create(conn, topic, **{"segment.bytes": 2000})["error_code"] == 0
        offset = 0
        for i in range(30):
            got = {}
            poll = threading.Thread(target=lambda o=offset: got.update(
                fetch(reader, topic, 0, o, max_wait_ms=10_000)))
            poll.start()
            values = [f"{i}-{k}" for k in range(1 + i % 3)]
            res = produce(conn, topic, 0, frame_of(values), acks=1 if i % 2 else -1)
            assert res["error_code"] == 0 and res["base_offset"] == offset, res
            poll.join(30)
            assert got["error_code"] == 0, got
            frames = list(iter_frames(got["records"]))
            assert [f.header.base_offset for f in frames] == [offset], (i, frames)
            assert [v.decode() for v in frames[0].batch().column("value").to_pylist()] \
                == values
            assert got["high_watermark"] == offset + len(values)
            offset += len(values)
        # one request of two frames, then a fetch at the second one
        two = frame_of(["x0", "x1"]) + frame_of(["y0"])
        assert produce(conn, topic, 0, two)["base_offset"] == offset
        got = fetch(reader, topic, 0, offset + 2)
        frames = list(iter_frames(got["records"]))
        assert [f.header.base_offset for f in frames] == [offset + 2], frames
        got = fetch(reader, topic, 0, offset)
        assert [f.header.base_offset for f in iter_frames(got["records"])] \
            == [offset, offset + 2]
