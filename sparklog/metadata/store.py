"""Topic metadata on the storage: the truth about which topics exist and their configs.

Layout under a storage root::

    <root>/topics/<topic>/config/<version>.json     versioned TopicConfig (VersionedFile)
    <root>/topics/<topic>/<partition>/...           partition logs (sparklog.log)

Creating a topic writes config version 1 with rename-no-replace, so of concurrent
creators exactly one wins. Deleting renames the topic directory away first (the topic
vanishes atomically for readers), then removes it. Both the broker and the Spark
source's ``path`` mode read topics from here, so storage alone describes the log.
"""

from __future__ import annotations

import uuid

import pyarrow as pa

from ..errors import (
    FileAlreadyExistsError, InvalidArgumentError, TopicExistsError,
    UnknownTopicOrPartitionError,
)
from ..storage import FileIO, open_fileio
from ..storage.versioned import VersionedFile
from .topic import TopicConfig, validate_topic_name

TOPICS_DIR = "topics"
TRASH_DIR = "deleted-topics"


class TopicStore:
    """Create, describe, alter, list and delete topics under a storage root URL."""

    def __init__(self, root, fileio: FileIO | None = None):
        if not isinstance(root, str):
            raise InvalidArgumentError(f"storage root must be a string URL, got {type(root).__name__}")
        self.root = root.rstrip("/") or root
        self.fileio = fileio or open_fileio(self.root)

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
        try:
            self._config_file(name).write(1, config.to_json())
        except FileAlreadyExistsError:
            raise TopicExistsError(f"topic {name!r} already exists") from None
        # partition directories are made when a partition is first opened, not here: a
        # topic of many partitions costs one file until they are used
        return config

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
                if i.is_dir and self._config_file(i.name).latest() is not None]

    def alter_topic(self, name: str, *, configs: dict | None = None,
                    delete_configs: list | None = None,
                    partitions: int | None = None) -> TopicConfig:
        """Set or remove config keys, or increase the partition count (Kafka allows no
        decrease). Written as the next config version; a concurrent alteration makes one
        of the two writers retry on the newer version."""
        while True:
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

    def delete_topic(self, name: str) -> None:
        """Delete a topic and all its data (UnknownTopicOrPartitionError if absent)."""
        self.describe_topic(name)
        trash = self.fileio.join(self.root, TRASH_DIR)
        self.fileio.mkdirs(trash)
        moved = self.fileio.join(trash, f"{name}.{uuid.uuid4().hex}")
        self.fileio.rename(self.topic_dir(name), moved)
        self.fileio.delete(moved, recursive=True)
