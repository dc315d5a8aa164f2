"""Topic metadata on the storage: the truth about which topics exist and their configs.

Layout under a storage root::

    <root>/topics/<topic>/config/<version>.json     versioned TopicConfig (VersionedFile)
    <root>/topics/<topic>/<partition>/...           partition logs (sparklog.log)

Creating a topic writes config version 1 with rename-no-replace, so of concurrent
creators exactly one wins; a name that collides with an existing topic once '.' is
replaced by '_' is refused (as Kafka does). Deleting renames the topic directory to
``<root>/deleted-topics/<deletion ms>-<random hex>/<topic>`` (the topic vanishes
atomically for readers; the derived name is the topic's own, so every valid name fits
the file system's 255-byte limit); the broker removes it ``file.delete.delay.ms``
later, as Kafka removes a deleted log. Both the broker and the Spark
source's ``path`` mode read topics from here, so storage alone describes the log.

With ``dir_mode``/``dir_owner``/``dir_group`` a new topic's directory gets that mode,
owner and group before its first file is written (the broker's
``storage.topic.dir.*``): on HDFS, the permissions that govern who may read the topic
without the broker.
"""

from __future__ import annotations

import logging
import time
import uuid

import pyarrow as pa

from ..errors import (
    FileAlreadyExistsError,
    InvalidArgumentError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from ..names import topic_collision_key, validate_topic_name
from ..storage import FileIO, open_fileio
from ..storage.paths import storage_root
from ..storage.versioned import VersionedFile, cas_attempts
from .topic import TopicConfig

TOPICS_DIR = "topics"
TRASH_DIR = "deleted-topics"

log = logging.getLogger(__name__)


class TopicStore:
    """Create, describe, alter, list and delete topics under a storage root URL."""

    def __init__(self, root, fileio: FileIO | None = None, *, dir_mode: int | None = None,
                 dir_owner: str | None = None, dir_group: str | None = None):
        if not isinstance(root, str):
            raise InvalidArgumentError(f"storage root must be a string URL, got {type(root).__name__}")
        self.root = storage_root(root)
        self.fileio = fileio or open_fileio(self.root)
        self.dir_permission = (dir_mode, dir_owner, dir_group)

    # --- paths -------------------------------------------------------------------------
    def topic_dir(self, topic: str) -> str:
        """Directory of a topic."""
        return self.fileio.join(self.root, TOPICS_DIR, validate_topic_name(topic))

    def partition_dir(self, topic: str, partition: int) -> str:
        """Directory of one partition's log."""
        return self.fileio.join(self.topic_dir(topic), str(int(partition)))

    def _config_file(self, topic: str) -> VersionedFile:
        return VersionedFile(self.fileio, self.fileio.join(self.topic_dir(topic), "config"))

    # --- operations ----------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int = 1, *, schema: pa.Schema | None = None,
                     configs: dict | None = None) -> TopicConfig:
        """Create a topic (TopicExistsError if it exists, including a concurrent
        creation that won)."""
        config = TopicConfig(name, partitions, schema, configs or {})
        self._check_collisions(name)
        if any(v is not None for v in self.dir_permission):
            # the directory's permissions hold before the topic exists (its config)
            directory = self.topic_dir(name)
            self.fileio.mkdirs(directory)
            self.fileio.set_permission(directory, *self.dir_permission)
        try:
            self._config_file(name).write(1, config.to_json())
        except FileAlreadyExistsError:
            raise TopicExistsError(f"topic {name!r} already exists") from None
        # partition directories are made when a partition is first opened, not here: a
        # topic of many partitions costs one file until they are used
        return config

    def _check_collisions(self, name: str) -> None:
        """InvalidTopicError if another topic's name equals ``name`` once '.' is replaced
        by '_' (Kafka's rule: their metric names would collide); a warning if another
        differs only in letter case (one directory on a case-insensitive file system)."""
        key = topic_collision_key(name)
        base = self.fileio.join(self.root, TOPICS_DIR)
        for info in self.fileio.list(base):
            other = info.name
            if other == name or not info.is_dir or not self._is_topic_name(other):
                continue
            if topic_collision_key(other) == key and self.topic_exists(other):
                raise InvalidTopicError(
                    f"topic {name!r} collides with existing topic {other!r} (names that "
                    "differ only in '.' versus '_' collide in metric names)")
            if other.casefold() == name.casefold():
                log.warning("topic %r differs from existing topic %r only in letter case: "
                            "they share one directory on a case-insensitive file system",
                            name, other)

    def describe_topic(self, name: str) -> TopicConfig:
        """The topic's current config (UnknownTopicOrPartitionError if absent)."""
        latest = self._config_file(name).latest()
        if latest is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        return TopicConfig.from_json(latest[1])

    def topic_exists(self, name: str) -> bool:
        """True if the topic exists."""
        return self._config_file(name).latest() is not None

    def list_topics(self) -> list[str]:
        """Names of existing topics, sorted."""
        base = self.fileio.join(self.root, TOPICS_DIR)
        return [i.name for i in self.fileio.list(base)
                if i.is_dir and self._is_topic_name(i.name)
                and self._config_file(i.name).latest() is not None]

    @staticmethod
    def _is_topic_name(name: str) -> bool:
        """True for a valid topic name; a directory under ``topics/`` named otherwise
        (not made by sparklog) is skipped with a warning."""
        try:
            validate_topic_name(name)
            return True
        except InvalidTopicError as exc:
            log.warning("skipping directory %r under %s/: %s", name, TOPICS_DIR, exc)
            return False

    def alter_topic(self, name: str, *, configs: dict | None = None,
                    delete_configs: list | None = None,
                    partitions: int | None = None) -> TopicConfig:
        """Set or remove config keys, or increase the partition count (Kafka allows no
        decrease). Written as the next config version; a concurrent alteration makes one
        of the two writers retry on the newer version (a bounded number of times)."""
        for _ in cas_attempts(f"alteration of topic {name!r}"):
            current = self.describe_topic(name)
            new_configs = dict(current.configs)
            new_configs.update(configs or {})
            for key in delete_configs or []:
                new_configs.pop(key, None)
            count = current.partitions if partitions is None else partitions
            if count < current.partitions:
                raise InvalidArgumentError(
                    f"topic {name!r} has {current.partitions} partitions; "
                    f"the count can only grow, not shrink to {count}")
            new = TopicConfig(name, count, current.schema, new_configs, current.version + 1)
            try:
                self._config_file(name).write(new.version, new.to_json())
            except FileAlreadyExistsError:
                continue
            return new  # the new partitions' directories are made on first use
        raise AssertionError("unreachable: cas_attempts raises once exhausted")

    def delete_topic(self, name: str) -> None:
        """Delete a topic and all its data now (UnknownTopicOrPartitionError if absent):
        :meth:`retire_topic`, then :meth:`remove_retired`."""
        self.remove_retired(self.retire_topic(name))

    def retire_topic(self, name: str, now_ms: int | None = None) -> str:
        """Make a topic vanish at once for every reader, its data kept for removal later
        (Kafka's rename of a deleted log to a ``-delete`` name): rename its directory to
        ``<root>/deleted-topics/<ms>-<hex>/<topic>``, where ``<ms>`` is the deletion time
        (``now_ms``, default now) that :meth:`retired` reports; return that
        ``deleted-topics/<ms>-<hex>`` directory. UnknownTopicOrPartitionError if absent.
        A topic created afterwards under the name starts in a fresh directory."""
        self.describe_topic(name)
        stamp = int(time.time() * 1000) if now_ms is None else int(now_ms)
        trash = self.fileio.join(self.root, TRASH_DIR, f"{stamp}-{uuid.uuid4().hex}")
        self.fileio.mkdirs(trash)
        self.fileio.rename(self.topic_dir(name), self.fileio.join(trash, name))
        return trash

    def retired(self) -> list[tuple[str, int]]:
        """``(directory, deletion time in ms)`` of each retired topic not yet removed
        (:meth:`retire_topic`); an entry of another form (an older broker's) is dated 0,
        so it is due at once."""
        base = self.fileio.join(self.root, TRASH_DIR)
        out = []
        for info in self.fileio.list(base):
            stamp, _, rest = info.name.partition("-")
            when = int(stamp) if stamp.isdigit() and rest else 0
            out.append((self.fileio.join(base, info.name), when))
        return sorted(out, key=lambda item: item[1])

    def remove_retired(self, directory: str) -> None:
        """Remove a retired topic's directory (:meth:`retire_topic`) and all it holds;
        one already removed (by another broker) is no error."""
        self.fileio.delete(directory, recursive=True)
