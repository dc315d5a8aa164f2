"""The instance record of a standalone broker: who last ran broker ``N`` on a storage root.

A broker that was killed leaves its segments open: on HDFS the NameNode keeps the dead
process's leases until their soft limit (60 s) expires, so a restarted broker could not
append to its own partitions for a minute. Kafka's answer is the log directory's lock
file; HBase's is the master's knowledge that a region server died. Here the broker
records itself in ``<root>/brokers/<id>.instance.json`` (host, pid, process start time)
when it starts. The next broker with that id reads the record:

* its process is gone (same host: no such pid, a zombie, or the pid reused): the
  predecessor is dead, so the new broker *fences* every partition as it opens it
  (``recover_lease``: the NameNode revokes the dead leases now, no soft-limit wait);
* its process is alive on this host: no fencing, and the record stays, so a second
  broker started on the same root still gets LeaseHeldError;
* it ran on another host (whose processes cannot be seen): no fencing (its partitions
  are taken over once HDFS's soft limit ended their leases); the record becomes ours.

Claiming is race-free between brokers starting together: the dead record is renamed
away (one renamer wins), then the new one is created (create-no-overwrite: one creator
wins); only the winner of both fences. A graceful stop deletes the record. Cluster mode
(ZooKeeper) does not use this: there the controller's leader epochs decide and every
takeover fences.
"""

from __future__ import annotations

import json
import logging
import os
import uuid

from ..errors import FileAlreadyExistsError, StorageError, StorageFileNotFoundError
from ..storage import FileIO
from ..storage.posix import HOST, owner_alive, proc_start

log = logging.getLogger(__name__)


class InstanceRecord:
    """The instance record of broker ``broker_id`` under ``root``."""

    def __init__(self, fileio: FileIO, root: str, broker_id: int):
        self.fileio = fileio
        self.path = fileio.join(root, "brokers", f"{broker_id}.instance.json")
        self.record: dict | None = None

    def claim(self) -> bool:
        """Record this process as the broker; True when the previous one is known to be
        dead (its partitions' leases may be revoked), False otherwise."""
        pid = os.getpid()
        mine = {"host": HOST, "pid": pid, "start": proc_start(pid), "token": uuid.uuid4().hex}
        previous = self._read()
        if previous is not None and previous.get("host") == HOST and owner_alive(previous):
            # said at INFO: each of its partitions is refused with its own LeaseHeldError
            log.info("%s: pid %s on this host still runs this broker on this storage; "
                        "its partitions stay refused (LeaseHeldError) while it lives",
                        self.path, previous.get("pid"))
            return False
        # dead, or on another host (cannot be seen: fence nothing, take the record over)
        predecessor_dead = previous is not None and previous.get("host") == HOST
        if previous is not None:
            tomb = f"{self.path}.{mine['token']}.old"
            try:
                self.fileio.rename(self.path, tomb)
            except (StorageFileNotFoundError, FileAlreadyExistsError):
                return False  # another starting broker claimed it first
            self.fileio.delete(tomb)
        self.fileio.mkdirs(self.fileio.split(self.path)[0])
        try:
            self.fileio.write_atomic(self.path, json.dumps(mine).encode())
        except FileAlreadyExistsError:
            return False
        self.record = mine
        if predecessor_dead and previous is not None:
            log.info("broker process %s ended without stopping: its partitions are fenced "
                     "as they open (lease recovery, no wait for lease expiry)",
                     previous.get("pid"))
        return predecessor_dead

    def release(self) -> None:
        """Delete the record if it is still this process's (graceful stop)."""
        if self.record is None:
            return
        try:
            if self._read() == self.record:
                self.fileio.delete(self.path)
        except StorageError as exc:
            log.warning("could not delete %s: %s", self.path, exc)
        self.record = None

    def _read(self) -> dict | None:
        try:
            doc = json.loads(self.fileio.read_all(self.path))
        except StorageFileNotFoundError:
            return None
        except ValueError:  # unreadable: as a record of an unknown (other) host
            return {}
        return doc if isinstance(doc, dict) else {}
