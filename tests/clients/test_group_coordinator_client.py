"""The consumer's group coordinator lookup against a broker older than FindCoordinator:
its group requests go to whichever broker is at hand, as before the API existed."""

from __future__ import annotations

import pytest

import sparklog
from sparklog.clients.types import TopicPartition
from sparklog.errors import UnsupportedVersionError
from sparklog.protocol import Connection
from sparklog.protocol.apis import SUPPORTED_VERSIONS, ApiKey
from sparklog.server.embedded import EmbeddedBroker


def test_a_broker_without_find_coordinator_coordinates_its_own_clients(storage_root,
                                                                       monkeypatch):
    # the broker (in this process) then answers FindCoordinator UNSUPPORTED_VERSION (35),
    # as a broker of a version before it does
    monkeypatch.delitem(SUPPORTED_VERSIONS, int(ApiKey.FIND_COORDINATOR))
    with EmbeddedBroker(storage_root) as broker:
        address = broker.bootstrap_servers
        with Connection(address) as conn, pytest.raises(UnsupportedVersionError):
            conn.request(ApiKey.FIND_COORDINATOR, {"key": "old"})
        with sparklog.Admin(address) as admin:
            admin.create_topic("t", 2)
        with sparklog.Producer(address) as producer:
            for i in range(10):
                producer.send("t", b"%d" % i, partition=i % 2)
            producer.flush(30)
        with sparklog.Consumer("t", bootstrap_servers=address, group_id="old",
                               auto_offset_reset="earliest") as c:
            assert c.assignment() == {TopicPartition("t", 0), TopicPartition("t", 1)}
            got = []
            while len(got) < 10:
                got += [r.value for rs in c.poll(500).values() for r in rs]
            c.commit()
            assert c.committed(TopicPartition("t", 0)) == 5
        with sparklog.Admin(address) as admin:
            assert admin.list_consumer_group_offsets("old")[TopicPartition("t", 1)].offset == 5
