"""``sparklog.connect()``: one call from a notebook to a working log.

``connect("file:///data/log")`` (or any storage URI: ``hdfs://``, ``webhdfs://``)
starts an in-process :class:`~sparklog.server.EmbeddedBroker` on that storage,
listening on an ephemeral 127.0.0.1 port, and returns a :class:`Session` whose
``producer()``, ``consumer()`` and ``admin()`` are ordinary clients of it (so the same
code later runs against a cluster by changing the argument). ``connect("host:port")``
connects to running brokers instead and starts nothing.

Connecting twice to the same storage in one process shares one embedded broker (a
storage has one writer per partition); it stops when the last session closes.
"""

from __future__ import annotations

import threading

from .clients.admin import Admin
from .clients.consumer import Consumer
from .clients.producer import Producer
from .errors import InvalidArgumentError

_STORAGE_SCHEMES = ("file://", "hdfs://", "webhdfs://", "viewfs://")
_EMBEDDED: dict[str, list] = {}  # storage URI -> [EmbeddedBroker, sessions open]
_LOCK = threading.Lock()


class Session:
    """Clients bound to one cluster (see the module docstring). Closing the session
    closes the clients it made and releases its embedded broker."""

    def __init__(self, bootstrap_servers: str, storage_uri: str | None = None,
                 client_configs: dict | None = None):
        self.bootstrap_servers = bootstrap_servers
        #: configs every client of the session gets (TLS and SASL settings)
        self.client_configs = dict(client_configs or {})
        self.storage_uri = storage_uri
        self._clients: list = []
        self._closed = False

    def __repr__(self) -> str:
        where = f"embedded on {self.storage_uri}" if self.storage_uri else "remote"
        return f"<sparklog.Session {self.bootstrap_servers} ({where})>"

    @property
    def embedded(self) -> bool:
        """True when this session runs its own in-process broker."""
        return self.storage_uri is not None

    @property
    def broker(self):
        """The EmbeddedBroker (None for a remote cluster)."""
        entry = _EMBEDDED.get(self.storage_uri) if self.storage_uri else None
        return entry[0] if entry else None

    def _track(self, client):
        if self._closed:
            client.close()
            raise InvalidArgumentError("the session is closed")
        self._clients.append(client)
        return client

    def producer(self, **configs) -> Producer:
        """A :class:`~sparklog.clients.producer.Producer` (Kafka-named configs)."""
        return self._track(Producer(self.bootstrap_servers,
                                    **{**self.client_configs, **configs}))

    def consumer(self, *topics, **configs) -> Consumer:
        """A :class:`~sparklog.clients.consumer.Consumer`, subscribed to ``topics`` if any."""
        return self._track(Consumer(*topics, bootstrap_servers=self.bootstrap_servers,
                                    **{**self.client_configs, **configs}))

    def admin(self, **kwargs) -> Admin:
        """An :class:`~sparklog.clients.admin.Admin` client."""
        return self._track(Admin(self.bootstrap_servers, **{**self.client_configs, **kwargs}))

    def close(self) -> None:
        """Close the session's clients; stop the embedded broker if this was its last
        session. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for client in reversed(self._clients):
            try:
                client.close()
            except Exception:  # closing must go on for the others
                pass
        self._clients.clear()
        if self.storage_uri is not None:
            with _LOCK:
                entry = _EMBEDDED.get(self.storage_uri)
                if entry is not None:
                    entry[1] -= 1
                    if entry[1] <= 0:
                        del _EMBEDDED[self.storage_uri]
                        entry[0].stop()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def connect(target: str, *, broker_config: dict | None = None,
            client_configs: dict | None = None) -> Session:
    """A :class:`Session` on a storage URI (embedded broker) or on ``host:port[,...]``
    bootstrap servers. ``broker_config`` passes broker properties (Kafka names, e.g.
    ``{"log.segment.bytes": 1 << 20}``) to a newly started embedded broker;
    ``client_configs`` go to every client of the session (``security_protocol``,
    ``ssl_cafile``, ``sasl_mechanism`` ...: :mod:`sparklog.security.client`)."""
    if not isinstance(target, str) or not target.strip():
        raise InvalidArgumentError(
            f"connect() takes a storage URI (file:///path) or host:port, got {target!r}")
    target = target.strip()
    if not target.startswith(_STORAGE_SCHEMES):
        if "://" in target and not target.startswith(("sparklog://", "PLAINTEXT://")):
            raise InvalidArgumentError(
                f"connect(): unknown scheme in {target!r}; use file://, hdfs://, "
                "webhdfs:// for embedded mode or host:port for a cluster")
        servers = target.split("://", 1)[-1]
        return Session(servers, client_configs=client_configs)
    from .server import EmbeddedBroker
    from .storage.paths import storage_root

    uri = storage_root(target)
    with _LOCK:
        entry = _EMBEDDED.get(uri)
        if entry is None:
            broker = EmbeddedBroker(uri, broker_config).start()
            entry = _EMBEDDED[uri] = [broker, 0]
        entry[1] += 1
    return Session(entry[0].bootstrap_servers, uri, client_configs)
