"""The broker's leadership is given to it at construction (default: the one its
coordination store calls for), shared with its partitions, and drives the instance
record of a standalone broker; one that does not fit the store is refused."""

from __future__ import annotations

import asyncio

import pytest

from sparklog.coordination.local import LocalCoordinationStore
from sparklog.errors import InvalidArgumentError
from sparklog.server.broker import Broker
from sparklog.server.config import BrokerConfig
from sparklog.server.instance import InstanceRecord
from sparklog.server.leadership import BrokerLeadership, StandaloneLeadership, leadership_for
from sparklog.storage import open_fileio

CONFIG = {"listeners": "127.0.0.1:0", "metrics.port": "-1"}


def test_a_given_leadership_is_the_brokers_and_its_partitions(storage_root):
    fileio = open_fileio(storage_root)
    store = LocalCoordinationStore(storage_root, fileio)
    given = StandaloneLeadership(InstanceRecord(fileio, storage_root, 0))
    broker = Broker(storage_root, BrokerConfig.from_props(CONFIG), store=store,
                    fileio=fileio, metrics=False, leadership=given)
    assert broker.leadership is given and broker.partitions.leadership is given

    async def serve():
        await broker.start()
        try:
            assert given.instance.record is not None  # claimed through the leadership
        finally:
            await broker.stop()
        assert given.instance.record is None  # released at the graceful stop

    asyncio.run(serve())


def test_the_default_leadership_is_the_stores(storage_root):
    fileio = open_fileio(storage_root)
    store = LocalCoordinationStore(storage_root, fileio)
    assert isinstance(leadership_for(store, fileio, storage_root, 0), StandaloneLeadership)
    broker = Broker(storage_root, BrokerConfig.from_props(CONFIG), store=store,
                    fileio=fileio, metrics=False)
    assert isinstance(broker.leadership, StandaloneLeadership)
    assert broker.partitions.leadership is broker.leadership
    broker.pool.shutdown()


def test_a_leadership_that_does_not_fit_is_refused(storage_root):
    fileio = open_fileio(storage_root)
    store = LocalCoordinationStore(storage_root, fileio)
    config = BrokerConfig.from_props(CONFIG)
    with pytest.raises(InvalidArgumentError, match="does not fit the coordination store"):
        Broker(storage_root, config, store=store, fileio=fileio, metrics=False,
               leadership=BrokerLeadership(store, 0))
    with pytest.raises(InvalidArgumentError, match="leadership must be"):
        Broker(storage_root, config, store=store, fileio=fileio, metrics=False,
               leadership=object())
