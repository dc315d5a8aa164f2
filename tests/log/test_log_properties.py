"""Property tests: random records round-trip through a partition log across rolls, reads
from any offset or timestamp return exactly the expected records, and reopening (as
writer or as reader) shows the same state."""

from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparklog.format.frame import iter_frames
from sparklog.log import LogReader, PartitionLog
from sparklog.storage import open_fileio
from tests.support.logfiles import raw_frame

frames_strategy = st.lists(
    st.lists(st.tuples(st.binary(max_size=40), st.integers(0, 2_000)), min_size=1, max_size=6),
    min_size=1, max_size=25)


def expected_first_at(records, timestamp, start=0):
    return next((o for o, (_, t) in enumerate(records) if o >= start and t >= timestamp), None)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames=frames_strategy, segment_frames=st.integers(1, 4),
       interval=st.sampled_from([1, 700, 4096]), data=st.data())
def test_round_trip_across_rolls_and_reopen(frames, segment_frames, interval, data):
    records = [r for frame in frames for r in frame]
    encoded = [raw_frame([v for v, _ in f], [t for _, t in f]) for f in frames]
    again = raw_frame([b"again"], [7])
    config = {"segment.bytes": segment_frames * max(map(len, encoded + [again])),
              "index.interval.bytes": interval}
    with tempfile.TemporaryDirectory() as tmp:
        fio = open_fileio(tmp)
        pdir = fio.join(tmp, "topics", "t", "0")
        with PartitionLog.open(fio, pdir, config) as plog:
            for frame in encoded:
                plog.append(frame)
            plog.flush()
            state = (plog.log_end_offset, [s.base_offset for s in plog.segments])
            assert state[0] == len(records)
            if sum(map(len, encoded)) > config["segment.bytes"]:
                assert len(state[1]) > 1  # it rolled

            def check_writer(log):
                offset = data.draw(st.integers(0, len(records) - 1), label="fetch offset")
                first = next(iter_frames(log.read(offset, 1).data)).header
                assert first.base_offset <= offset <= first.last_offset
                ts = data.draw(st.integers(-1, 2_001), label="timestamp")
                assert log.offset_for_timestamp(ts) == expected_first_at(records, ts)

            check_writer(plog)

        def check_reader(reader):
            assert reader.log_end_offset() == len(records)
            start = data.draw(st.integers(0, len(records)), label="start")
            end = data.draw(st.integers(start, len(records)), label="end")
            got = [(o, v, t) for b in reader.read_batches(start, end)
                   for o, v, t in zip(b.column("__offset").to_pylist(),
                                      b.column("value").to_pylist(),
                                      b.column("__timestamp").cast("int64").to_pylist())]
            assert got == [(o, v, t) for o, (v, t) in enumerate(records)][start:end]
            ts = data.draw(st.integers(-1, 2_001), label="reader timestamp")
            assert reader.offset_for_timestamp(ts) == expected_first_at(records, ts)

        check_reader(LogReader(fio, pdir))
        with PartitionLog.open(fio, pdir, config) as plog:  # reopen: the same state
            assert (plog.log_end_offset, [s.base_offset for s in plog.segments]) == state
            check_writer(plog)
            result = plog.append(again)
            assert result.base_offset == len(records)
        records.append((b"again", 7))
        check_reader(LogReader(fio, pdir))
