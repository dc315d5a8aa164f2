"""The two systems under test, side by side on one machine: a sparklog broker process
(tests/support/brokerproc.py; its own listener and a Kafka listener) and a one-node
Apache Kafka (tests/support/kafkaserver.py), both with their data under one temporary
directory (the same disk), both on loopback."""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from sparklog import Admin, NewTopic  # noqa: E402
from tests.support.brokerproc import BrokerProcess  # noqa: E402  (the tests' broker process helper)
from tests.support.kafkaserver import KafkaCluster  # noqa: E402  (the tests' Kafka helper)


def say(message: str) -> None:
    """Progress on stderr."""
    print(f"[peers {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class KafkaListenerBroker(BrokerProcess):
    """A sparklog broker process with a second listener, ``KAFKA``, speaking Apache
    Kafka's protocol (``kafka.listener.names``), both on loopback ports the OS picks."""

    def command(self) -> list[str]:
        cmd = super().command()
        at = cmd.index("--listen") + 1
        cmd[at] = f"PLAINTEXT://{self.host}:{self.port},KAFKA://127.0.0.1:0"
        return [*cmd, "--override", "listener.security.protocol.map="
                "PLAINTEXT:PLAINTEXT,KAFKA:PLAINTEXT", "--override", "kafka.listener.names=KAFKA"]

    @property
    def kafka_address(self) -> str:
        """``127.0.0.1:<port>`` of the Kafka listener (from the broker's start-up lines)."""
        for line in reversed(self._lines):  # the latest start's
            if line.startswith("listener KAFKA "):
                return line.rsplit(" ", 1)[1].strip()
        raise RuntimeError("the sparklog broker printed no KAFKA listener line")


class Systems:
    """A started sparklog broker and Kafka node under ``base`` (a directory); topics
    are created on both with :meth:`create_topic`."""

    def __init__(self, base: Path, kafka_heap: str = "1g"):
        self.base = Path(base)
        self.storage = (self.base / "sparklog").as_uri()
        (self.base / "sparklog").mkdir(parents=True, exist_ok=True)
        self.broker = KafkaListenerBroker(self.storage, log_path=self.base / "sparklog-broker.log",
                                    log_level="WARNING")
        self.kafka = KafkaCluster(str(self.base / "kafka"), 1, heap=kafka_heap)

    def __enter__(self):
        say("starting a sparklog broker and an Apache Kafka node (KRaft)")
        self.broker.__enter__()
        try:
            self.kafka.start()
        except Exception:
            self.broker.__exit__(None, None, None)
            raise
        say(f"sparklog on {self.broker.address} (its Kafka listener on "
            f"{self.broker.kafka_address}), Kafka on {self.kafka.bootstrap}")
        return self

    def __exit__(self, *exc):
        self.kafka.stop()
        self.broker.__exit__(*exc)

    @property
    def sparklog(self) -> str:
        """The sparklog broker's address."""
        return self.broker.address

    @property
    def sparklog_kafka(self) -> str:
        """The sparklog broker's Kafka listener (bootstrap servers for Kafka's clients)."""
        return self.broker.kafka_address

    @property
    def bootstrap(self) -> str:
        """Kafka's bootstrap servers."""
        return self.kafka.bootstrap

    def create_topic(self, name: str, partitions: int = 1, config: dict | None = None,
                     kafka_config: dict | None = None) -> None:
        """Create ``name`` on both (``config`` on both, ``kafka_config`` on Kafka only)."""
        from confluent_kafka.admin import AdminClient
        from confluent_kafka.admin import NewTopic as KafkaNewTopic

        with Admin(self.sparklog) as admin:
            admin.create_topics([NewTopic(name, num_partitions=partitions,
                                          configs=dict(config or {}) or None)])
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        conf = {**(config or {}), **(kafka_config or {})}
        for future in admin.create_topics([KafkaNewTopic(name, partitions, 1,
                                                         config=conf)]).values():
            future.result(60)
