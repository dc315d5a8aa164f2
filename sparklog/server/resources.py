"""The broker's file descriptor plan: how many partitions it keeps open and how many
connections it accepts, from the process's ``RLIMIT_NOFILE``.

An open partition holds two descriptors (its active segment, opened for append, and
the segment's lease); a connection holds one; reads and ``sendfile`` open segment files
briefly. At start the broker raises its soft limit to the hard limit (when the soft
one is lower), then divides what it has:

* ``RESERVED_FDS`` for the interpreter, the log, the storage client, ZooKeeper and the
  brief opens of reads;
* ``max.open.partitions`` partitions (0, the default: half of the rest, two
  descriptors each); beyond it the least recently used idle partitions are closed and
  reopened on their next use (an LRU, as large Kafka clusters need);
* the rest for connections: ``max.connections`` is lowered to it when larger.

Each decision is logged once, with what to change when the limit is too low.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .config import MAX_INT

log = logging.getLogger(__name__)

#: descriptors kept for everything but partitions and connections
RESERVED_FDS = 64
#: descriptors an open partition holds
FDS_PER_PARTITION = 2
#: the least the plan gives partitions and connections, whatever the limit
MIN_OPEN_PARTITIONS = 4
MIN_CONNECTIONS = 8


@dataclass(frozen=True)
class ResourceLimits:
    """The plan: the descriptor limit, partitions kept open, connections accepted."""

    fd_limit: int
    max_open_partitions: int
    max_connections: int


def raise_fd_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit when lower; return (soft, was)."""
    try:
        import resource
    except ImportError:  # not POSIX: nothing to plan with
        return 1 << 20, 1 << 20
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    was = soft
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the file descriptor limit from %d to %d: %s",
                        soft, target, exc)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return soft, was


def plan(max_open_partitions: int, max_connections: int, partitions: int,
         fd_limit: int | None = None) -> ResourceLimits:
    """The plan for a broker configured with ``max.open.partitions`` (0: automatic) and
    ``max.connections``, serving ``partitions`` partitions; ``fd_limit`` defaults to
    the process's (raised as :func:`raise_fd_limit` does)."""
    was = None
    if fd_limit is None:
        fd_limit, was = raise_fd_limit()
    usable = max(fd_limit - RESERVED_FDS, 0)
    auto = max_open_partitions <= 0
    open_parts = usable // 2 // FDS_PER_PARTITION if auto else max_open_partitions
    open_parts = max(open_parts, MIN_OPEN_PARTITIONS)
    conns = max(usable - open_parts * FDS_PER_PARTITION, MIN_CONNECTIONS)
    limits = ResourceLimits(fd_limit, open_parts, min(max_connections, conns))
    raised = f" (raised from {was})" if was is not None and was != fd_limit else ""
    log.info("file descriptors: limit %d%s; up to %d partition(s) open at once "
             "(max.open.partitions%s), up to %d connection(s)", fd_limit, raised,
             open_parts, "=auto" if auto else f"={max_open_partitions}",
             limits.max_connections)
    if partitions > open_parts:
        log.warning("file descriptors: %d partition(s) would need %d descriptors to be open "
                    "at once, the limit is %d: at most %d stay open, the least recently "
                    "used idle ones are closed and reopened on use (raise ulimit -n to "
                    "avoid reopening)", partitions, partitions * FDS_PER_PARTITION + RESERVED_FDS,
                    fd_limit, open_parts)
    if max_connections > conns and max_connections != MAX_INT:
        log.warning("file descriptors: max.connections=%d does not fit the limit %d; "
                    "accepting at most %d connection(s) (raise ulimit -n)",
                    max_connections, fd_limit, conns)
    if not auto and open_parts * FDS_PER_PARTITION + MIN_CONNECTIONS > usable:
        log.error("file descriptors: max.open.partitions=%d needs %d descriptors, the limit "
                  "%d leaves %d: opening partitions will fail with 'Too many open files' "
                  "(raise ulimit -n or lower max.open.partitions)", open_parts,
                  open_parts * FDS_PER_PARTITION, fd_limit, usable)
    return limits


__all__ = ["ResourceLimits", "plan", "raise_fd_limit"]
