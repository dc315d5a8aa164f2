"""Fixtures shared by the Kafka listener's tests of this package.

``kafka_address`` reads the Kafka listener's address off the module's own ``broker``
fixture (each test module starts the broker it needs, with
:func:`tests.support.kafkaconn.start_with_kafka_listener`); ``kafka_tools`` skips a
module's Java-tool tests, saying why, where Kafka's tools cannot run."""

from __future__ import annotations

import pytest

from tests.support.kafkaserver import kafka_unavailable


@pytest.fixture(scope="module")
def kafka_address(broker) -> str:
    """host:port of the module's broker's Kafka listener (named KAFKA)."""
    return broker.broker.listener_addresses["KAFKA"]


@pytest.fixture(scope="module")
def kafka_tools() -> None:
    """Skips (saying why) when Kafka's tools cannot run here."""
    why = kafka_unavailable()
    if why:
        pytest.skip(why)
