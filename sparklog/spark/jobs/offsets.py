"""What an incremental job consumes: application ids and offset ranges (Kafka JSON form).

A job consumes, per topic partition, the half-open range ``[from_offset, until_offset)``
between the offsets its output last committed and the partition's high watermark.
Offsets are keyed by ``(topic, partition)`` tuples (a
:class:`sparklog.clients.types.TopicPartition` compares equal to one). The JSON form is
the one of Spark's Kafka source options (``startingOffsets``/``endingOffsets``):
``{"topic": {"0": 23, "1": 42}}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ...errors import InvalidArgumentError
from ...names import MAX_APP_ID_LENGTH, validate_app_id, validate_topic_name  # noqa: F401


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets ``[from_offset, until_offset)`` of one topic partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    def __post_init__(self):
        validate_topic_name(self.topic)
        for name in ("partition", "from_offset", "until_offset"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidArgumentError(
                    f"offset range of {self.topic}-{self.partition}: {name} must be an "
                    f"int >= 0, got {value!r}")
        if self.until_offset < self.from_offset:
            raise InvalidArgumentError(
                f"offset range of {self.topic}-{self.partition}: until_offset "
                f"{self.until_offset} < from_offset {self.from_offset}")

    @property
    def count(self) -> int:
        """Number of offsets in the range."""
        return self.until_offset - self.from_offset

    @property
    def topic_partition(self) -> tuple[str, int]:
        """The ``(topic, partition)`` key."""
        return (self.topic, self.partition)

    def to_dict(self) -> dict:
        """JSON-able form (names of Spark's Kafka source: fromOffset, untilOffset)."""
        return {"topic": self.topic, "partition": self.partition,
                "fromOffset": self.from_offset, "untilOffset": self.until_offset}

    @classmethod
    def from_dict(cls, doc: dict) -> "OffsetRange":
        """Inverse of :meth:`to_dict` (InvalidArgumentError naming a missing field)."""
        try:
            return cls(doc["topic"], doc["partition"], doc["fromOffset"], doc["untilOffset"])
        except (KeyError, TypeError) as exc:
            raise InvalidArgumentError(f"offset range {doc!r}: missing field {exc}") from None


def parse_offsets(value, what: str = "offsets") -> dict:
    """Parse offsets in Kafka's JSON form (a string, or the decoded dict) into
    ``{(topic, partition): offset}`` with every offset >= 0; InvalidArgumentError
    naming the bad entry (the Spark source's option parser does the parsing)."""
    from ..source.options import parse_partition_json

    text = value if isinstance(value, str) else json.dumps(value)
    out = parse_partition_json(what, text)
    for (topic, partition), offset in out.items():
        if offset < 0:
            raise InvalidArgumentError(
                f"{what}: offset {offset} of {topic}-{partition} must be >= 0")
    return out


def advance(offsets: dict, ranges) -> dict:
    """``offsets`` with each range's partition moved to its ``until_offset``."""
    out = dict(offsets)
    for r in ranges:
        out[r.topic_partition] = max(out.get(r.topic_partition, 0), r.until_offset)
    return out
