"""A stale writer of a deleted topic brings nothing back under the topic's name (#31).

Deleting a topic renames ``topics/<t>`` to ``deleted-topics/<ms>-<hex>/<t>``; in cluster
mode the old leader may still be writing. Every file the partition's writer creates
inside its directory after its open (a rolled segment's indexes, the log start offset
checkpoint, the producer snapshot, a tail repair's copy) is created non-recursively, so
such a late write fails (the log goes offline) and creates nothing. On today's code
before the fix, each of these writes re-created ``topics/<t>/<p>/``.
"""

from __future__ import annotations

import os

import pytest

from sparklog.errors import StorageError, StorageFileNotFoundError
from sparklog.log import PartitionLog
from sparklog.log.layout import PartitionListing
from sparklog.log.recovery import repair_tail
from sparklog.log.segment import LogSegment, write_replacing
from sparklog.server.producer_state import ProducerSnapshots, ProducerState
from sparklog.storage.versioned import VersionedFile
from tests.support.logfiles import raw_frame


@pytest.fixture
def root(fio, tmp_path):
    return tmp_path.as_uri()


@pytest.fixture
def pdir(fio, root):
    return fio.join(root, "topics", "orders", "0")


def retire(fio, root) -> str:
    """Rename the topic's directory away as a topic deletion does; return where to."""
    trash = fio.join(root, "deleted-topics", "1700000000000-abc")
    fio.mkdirs(trash)
    fio.rename(fio.join(root, "topics", "orders"), fio.join(trash, "orders"))
    return fio.join(trash, "orders", "0")


def assert_nothing_came_back(fio, root) -> None:
    assert not fio.exists(fio.join(root, "topics", "orders")), \
        [i.name for i in fio.list(fio.join(root, "topics", "orders"))]


def fill(plog, n=3):
    for i in range(n):
        plog.append(raw_frame([f"v{i}".encode()]))
    plog.sync()


def test_the_log_start_checkpoint_of_a_stale_writer_goes_offline_and_creates_nothing(
        fio, root, pdir):
    plog = PartitionLog.open(fio, pdir, {"segment.bytes": 1 << 20})
    fill(plog)
    plog.roll()
    fill(plog)
    plog.wait_sealed()
    moved = retire(fio, root)
    with pytest.raises(StorageError, match="is offline: .*partition directory vanished"):
        plog.delete_segments_before(2)
    assert plog.offline is not None
    with pytest.raises(StorageError, match="is offline"):
        plog.append(raw_frame([b"late"]))
    plog.close()
    assert_nothing_came_back(fio, root)
    assert fio.exists(fio.join(moved, "00000000000000000000.index"))


def test_sealing_a_rolled_segment_after_the_rename_creates_no_index(fio, root, pdir):
    plog = PartitionLog.open(fio, pdir)
    fill(plog)
    plog.close()
    seg = LogSegment.of(fio, pdir, PartitionListing.scan(fio, pdir).logs()[0])
    retire(fio, root)
    with pytest.raises(StorageFileNotFoundError, match="does not exist"):
        seg.seal()
    with pytest.raises(StorageFileNotFoundError):
        write_replacing(fio, fio.join(pdir, "00000000000000000000.timeindex"), b"x")
    assert_nothing_came_back(fio, root)


def test_a_producer_snapshot_after_the_rename_creates_nothing(fio, root, pdir):
    PartitionLog.open(fio, pdir).close()
    snapshots = ProducerSnapshots(fio, pdir)
    snapshots.write(ProducerState(), 0)
    retire(fio, root)
    with pytest.raises(StorageFileNotFoundError):
        snapshots.write(ProducerState(), 3)
    assert_nothing_came_back(fio, root)


def test_a_tail_repair_after_the_rename_creates_nothing(fio, root, pdir):
    plog = PartitionLog.open(fio, pdir)
    fill(plog)
    path = plog.active_segment.path
    plog.close()
    retire(fio, root)
    with pytest.raises(StorageFileNotFoundError):
        repair_tail(fio, path, 10)
    assert_nothing_came_back(fio, root)


def test_a_stale_writer_closing_after_the_rename_creates_nothing(fio, root, pdir):
    plog = PartitionLog.open(fio, pdir, {"segment.bytes": 1 << 20})
    fill(plog)
    plog.roll()
    plog.append(raw_frame([b"unsynced"]))
    moved = retire(fio, root)
    try:
        plog.roll()
    except StorageError:
        pass  # the local disk fences the moved file's writer: the roll fails first
    try:
        plog.close()
    except StorageError:
        pass
    assert_nothing_came_back(fio, root)
    assert os.listdir(fio.local_path(moved))


def test_the_first_open_still_makes_the_partition_directory(fio, root, pdir):
    with PartitionLog.open(fio, pdir) as plog:
        fill(plog, 1)
    assert fio.exists(pdir)


def test_a_versioned_file_without_parents_writes_only_into_an_existing_directory(fio, root):
    directory = fio.join(root, "absent")
    with pytest.raises(StorageFileNotFoundError, match="does not exist"):
        VersionedFile(fio, directory, parents=False).write(1, b"{}")
    assert not fio.exists(directory)
    VersionedFile(fio, directory).write(1, b"{}")  # the default makes it
    assert fio.exists(directory)


def test_webhdfs_keeps_the_recursive_create_for_partition_files():
    from sparklog.storage.local import LocalFileIO
    from sparklog.storage.webhdfs import WebHdfsFileIO

    assert WebHdfsFileIO.non_recursive_create is False
    assert WebHdfsFileIO("webhdfs://127.0.0.1:9/r").in_existing_dir() is True
    assert LocalFileIO.non_recursive_create is True


def test_on_hdfs_a_stale_writer_rolling_after_the_rename_goes_offline_and_creates_nothing(
        hdfs_env, request):
    # on HDFS a stream outlives the rename of its directory (its lease is the file's, not
    # the path's), so the roll reaches the create of the next segment: refused
    from sparklog.storage import open_fileio

    root = f"{hdfs_env.hdfs_uri}/stale-writer/{request.node.name}"
    fio = open_fileio(root)
    pdir = fio.join(root, "topics", "orders", "0")
    plog = PartitionLog.open(fio, pdir)
    try:
        fill(plog)
        moved = retire(fio, root)
        with pytest.raises(StorageFileNotFoundError, match="does not exist"):
            plog.roll()
        assert "partition directory vanished" in str(plog.offline)
        assert plog.offline is not None
        assert_nothing_came_back(fio, root)
        assert fio.exists(fio.join(moved, "00000000000000000000.log"))
    finally:
        plog.release_abandoned()
        fio.delete(root, recursive=True)
