"""The network client's choice of a broker for requests any broker can answer."""

from __future__ import annotations

from sparklog.clients.network.network import NetworkClient
from sparklog.protocol.apis import ApiKey
from sparklog.server import EmbeddedBroker
from tests.support.zkserver import TcpProxy


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def test_a_request_for_any_broker_avoids_one_that_stopped_answering(tmp_path):
    """Two brokers, the first behind a proxy that goes silent (a lost host: no answer,
    no reset): with a request to it waiting for its timeout, a request any broker can
    answer goes to the other one and is answered at once (Kafka's least loaded node),
    instead of queueing behind the silent broker until the request timeout."""
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    with EmbeddedBroker(first.as_uri()) as lost, EmbeddedBroker(second.as_uri()) as live:
        proxy = TcpProxy(_host_port(lost.address))
        try:
            client = NetworkClient([f"127.0.0.1:{proxy.port}", live.address],
                                   request_timeout_ms=60000)
            try:
                silent = client._connect("127.0.0.1", proxy.port)
                answering = client._connect(*_host_port(live.address))
                assert silent.send(ApiKey.API_VERSIONS, {}).get(10)["error_code"] == 0
                proxy.silence()
                stuck = silent.send(ApiKey.API_VERSIONS, {})
                assert not stuck.is_done
                chosen = client.any_connection()
                assert chosen is answering, "a request for any broker went to the silent one"
                assert client.request(ApiKey.API_VERSIONS, {}, timeout=10)["error_code"] == 0
            finally:
                client.close()
        finally:
            proxy.close()
