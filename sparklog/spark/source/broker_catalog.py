"""The broker-backed catalog of the Spark source (option ``bootstrap.servers``).

Topics and typed schemas come from the broker's Metadata/DescribeConfigs (through
:class:`~sparklog.clients.admin.Admin`), offsets and segment lists from DescribeLog sent to each
partition's leader, timestamp lookups from ListOffsets. The DescribeLog answer names the
storage root the broker writes to; the tasks read the segment files there (or under the
``path`` option when executors see the storage under another URL). The broker is never
on the data path.
"""

from __future__ import annotations

from ...errors import NotLeaderError, UnknownTopicOrPartitionError
from ...metadata import TopicConfig
from ...protocol.apis import ApiKey
from ...protocol.codec import raise_for_error
from .catalog import Catalog
from .planning import LogSnapshot

_CLIENT_ID = "sparklog-spark"
_ATTEMPTS = 3


class BrokerCatalog(Catalog):
    """A catalog asking the broker(s) at ``bootstrap_servers``; ``storage_root``
    overrides the root the broker reports; ``security`` holds TLS and SASL client
    configs (kafka-python's names); ``storage_options`` go to ``open_fileio`` in the
    tasks (a Kerberos keytab login)."""

    def __init__(self, bootstrap_servers: str, storage_root: str | None = None, *,
                 security: dict | None = None, storage_options: dict | None = None):
        from ...clients.admin import Admin
        from ...clients.network.network import NetworkClient
        from ...security.client import ClientSecurity

        self.admin = Admin(bootstrap_servers, client_id=_CLIENT_ID, **(security or {}))
        self.client = NetworkClient(bootstrap_servers, client_id=_CLIENT_ID,
                                    security=ClientSecurity.from_configs(security))
        self.storage_options = dict(storage_options or {})
        self._root = storage_root
        self._configs: dict = {}

    @property
    def root(self) -> str:
        """The storage root the tasks read (the broker's unless overridden)."""
        if not self._root:
            resp = self.client.request(ApiKey.DESCRIBE_LOG, {"topics": []})
            self._root = resp["storage_root"]
        return self._root

    def list_topics(self) -> list[str]:
        """Names of existing topics."""
        return self.admin.list_topics()

    def topic_config(self, topic: str) -> TopicConfig | None:
        """The topic's config, or None if it does not exist (cached)."""
        if topic not in self._configs:
            try:
                (desc,) = self.admin.describe_topics([topic])
            except UnknownTopicOrPartitionError:
                return None
            self._configs[topic] = TopicConfig(
                topic, len(desc.partitions), desc.schema,
                {k: desc.configs[k] for k in desc.explicit if k in desc.configs})
        return self._configs[topic]

    def partition_states(self, topic: str, partitions) -> dict:
        """DescribeLog of ``partitions``, each asked of its leader (retried after a
        metadata refresh when leadership moved)."""
        pending = list(partitions)
        out = {}
        for attempt in range(_ATTEMPTS):
            info = self.client.topic_info(topic, refresh=attempt > 0)
            by_leader: dict = {}
            for p in pending:
                leader = info.partitions[p].leader if p < len(info.partitions) else -1
                by_leader.setdefault(leader, []).append(p)
            retry = []
            for leader, parts in by_leader.items():
                resp = self.client.request(
                    ApiKey.DESCRIBE_LOG, {"topics": [{"name": topic, "partitions": parts}]},
                    node_id=leader)
                if not self._root:
                    self._root = resp["storage_root"]
                for t in resp["topics"]:
                    raise_for_error(t, f"DescribeLog of topic {topic!r}")
                    for item in t["partitions"]:
                        p = item["partition"]
                        try:
                            raise_for_error(item, f"DescribeLog of {topic}-{p}")
                        except NotLeaderError:
                            if attempt == _ATTEMPTS - 1:
                                raise
                            retry.append(p)
                            continue
                        out[p] = LogSnapshot(
                            topic, p, item["log_start_offset"], item["high_watermark"],
                            tuple((s["base_offset"], s["size"]) for s in item["segments"]))
            if not retry:
                return out
            pending = retry
        return out

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """First offset whose timestamp is >= ``timestamp_ms``, or None."""
        found = self.admin.list_offsets({(topic, partition): int(timestamp_ms)})
        (result,) = found.values()
        return None if result.offset < 0 else result.offset

    def commit_group_offsets(self, group_id: str, offsets: dict) -> None:
        """Publish ``{(topic, partition): next offset}`` as the group's committed offsets
        (a simple, memberless commit: for lag monitoring)."""
        from ...clients.network.coordinator import coordinator_request
        from ...clients.network.offsets import commit_request

        body = commit_request(group_id, offsets)
        if not body["topics"]:
            return
        resp = coordinator_request(self.client, group_id, ApiKey.OFFSET_COMMIT, body)
        for t in resp["topics"]:
            for p in t["partitions"]:
                raise_for_error(p, f"commit of {t['name']}-{p['partition']} for group "
                                   f"{group_id!r}")

    def close(self) -> None:
        """Release connections and file handles."""
        self.admin.close()
        self.client.close()
