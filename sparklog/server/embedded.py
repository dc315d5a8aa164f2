"""EmbeddedBroker: the same broker, in-process, on a background thread's event loop.

Used by notebooks, tests and ``sparklog.connect("file:///...")``: no server to start,
yet clients talk to it over real TCP on 127.0.0.1 (an ephemeral port by default)::

    with EmbeddedBroker("file:///data/log") as broker:
        producer = Producer(bootstrap_servers=broker.bootstrap_servers)
"""

from __future__ import annotations

import asyncio
import logging
import threading

from ..errors import BrokerNotAvailableError
from .broker import Broker
from .config import BrokerConfig

log = logging.getLogger(__name__)


#: what an embedded broker sets unless its ``props`` say otherwise: an ephemeral
#: loopback port, and no initial rebalance delay (a group's first members are not made
#: to wait for more; Kafka's EmbeddedKafkaCluster and its development
#: config/server.properties set the same)
EMBEDDED_DEFAULTS = {"listeners": "127.0.0.1:0", "group.initial.rebalance.delay.ms": "0"}


class EmbeddedBroker:
    """A :class:`Broker` on its own thread. ``props`` are broker properties (Kafka
    names), over :data:`EMBEDDED_DEFAULTS` (``listeners`` ``127.0.0.1:0``,
    ``group.initial.rebalance.delay.ms`` 0)."""

    def __init__(self, storage_uri: str, props: dict | None = None, *, store=None,
                 start_timeout: float = 60.0):
        props = {**EMBEDDED_DEFAULTS, **(props or {})}
        self.config = BrokerConfig.from_props(props)
        self.storage_uri = storage_uri
        self.start_timeout = start_timeout
        # its client raises every refusal to the caller: no second report in the log
        self.broker = Broker(storage_uri, self.config, store=store,
                             refusal_log_level=logging.DEBUG)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stop_requested: asyncio.Event | None = None

    @property
    def address(self) -> str:
        """``host:port`` of the running broker."""
        return self.broker.address

    @property
    def bootstrap_servers(self) -> str:
        """The address in the form clients take (``host:port``)."""
        return self.broker.address

    def start(self) -> "EmbeddedBroker":
        """Start the broker thread and wait until it listens (raises its start error)."""
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._main, name="sparklog-embedded-broker",
                                        daemon=True)
        self._thread.start()
        if not self._ready.wait(self.start_timeout):
            raise BrokerNotAvailableError(
                f"embedded broker on {self.storage_uri} did not start within "
                f"{self.start_timeout}s")
        if self._error is not None:
            self._thread.join()
            self._thread = None
            raise self._error
        return self

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        finally:
            loop.close()

    async def _serve(self) -> None:
        self._stop_requested = asyncio.Event()
        try:
            await self.broker.start()
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            try:
                await self.broker.stop()
            except Exception:
                pass
            return
        self._ready.set()
        await self._stop_requested.wait()
        await self.broker.stop()

    def stop(self) -> None:
        """Graceful stop (flush, sync, release); waits for the thread. Idempotent."""
        if self._thread is None:
            return
        if self._loop is not None and self._stop_requested is not None:
            try:
                self._loop.call_soon_threadsafe(self._stop_requested.set)
            except RuntimeError:  # loop already closed
                pass
        self._thread.join()
        self._thread = None

    def __enter__(self) -> "EmbeddedBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
