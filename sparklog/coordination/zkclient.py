"""Connecting to ZooKeeper (kazoo) inside a chroot, and the serial event worker.

:func:`connect_zk` opens a kazoo session for a connect string
``host:port[,host:port...][/chroot]``, creating the chroot and sparklog's persistent
top-level nodes on the way (as Kafka does on startup). The client keeps reconnecting
forever after a connection loss; callers watch :class:`kazoo.protocol.states.KazooState`
transitions (SUSPENDED: connection lost, session maybe alive; LOST: session expired;
CONNECTED) with ``client.add_listener``.

:class:`EventWorker` runs every reaction to a ZooKeeper watch on one thread, in order
(Kafka's ControllerEventManager idea): watch callbacks only enqueue, handlers re-read
what they need from ZooKeeper. Nothing is processed on kazoo's own threads, which must
never block.
"""

from __future__ import annotations

import logging
import queue
import threading

from ..errors import CoordinationError, InvalidConfigError
from .zkpaths import PERSISTENT_PATHS, parse_zk_connect

log = logging.getLogger(__name__)

#: Kafka's defaults: zookeeper.session.timeout.ms (0.8: 6000) and
#: zookeeper.connection.timeout.ms (defaults to the session timeout)
DEFAULT_SESSION_TIMEOUT_MS = 6000


def _check_ms(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidConfigError(f"{name} must be a positive int (milliseconds), got {value!r}")
    return value


def _retry(max_tries: int):
    from kazoo.retry import KazooRetry

    return KazooRetry(max_tries=max_tries, delay=0.05, backoff=2, max_delay=1.0,
                      ignore_expire=False)


def connect_zk(connect: str, *, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
               connection_timeout_ms: int | None = None, create_layout: bool = True,
               security: dict | None = None):
    """Return a started :class:`kazoo.client.KazooClient` rooted at the connect string's
    chroot.

    The chroot node is created when missing, and with ``create_layout`` the persistent
    top-level nodes of :mod:`sparklog.coordination.zkpaths` too. CoordinationError names
    the connect string when no server answers within ``connection_timeout_ms``
    (default: the session timeout); InvalidConfigError when the string is malformed.
    ``security`` adds KazooClient's ``auth_data`` and ``default_acl``
    (:func:`sparklog.security.zkacl.kazoo_security`: ``zookeeper.set.acl``).
    """
    from kazoo.client import KazooClient
    from kazoo.exceptions import KazooException
    from kazoo.handlers.threading import KazooTimeoutError

    hosts, chroot = parse_zk_connect(connect)
    session_timeout_ms = _check_ms(session_timeout_ms, "zookeeper.session.timeout.ms")
    connection_timeout_ms = _check_ms(connection_timeout_ms or session_timeout_ms,
                                      "zookeeper.connection.timeout.ms")

    def start(target: str):
        client = KazooClient(hosts=target, timeout=session_timeout_ms / 1000.0,
                             connection_retry=_retry(-1), command_retry=_retry(5),
                             **(security or {}))
        try:
            client.start(timeout=connection_timeout_ms / 1000.0)
        except (KazooTimeoutError, KazooException) as exc:
            client.close()
            raise CoordinationError(
                f"cannot connect to ZooKeeper at {connect!r} within "
                f"{connection_timeout_ms} ms: {exc or type(exc).__name__}") from None
        return client

    if chroot:
        boot = start(hosts)
        try:
            boot.ensure_path(chroot)
        finally:
            boot.stop()
            boot.close()
    client = start(hosts + chroot)
    if create_layout:
        try:
            for path in PERSISTENT_PATHS:
                client.ensure_path(path)
        except KazooException as exc:
            client.stop()
            client.close()
            raise CoordinationError(f"ZooKeeper at {connect!r}: cannot create the "
                                    f"sparklog layout: {exc!r}") from None
    return client


def close_zk(client) -> None:
    """Stop and close a kazoo client, ignoring errors (its ephemeral nodes vanish now)."""
    if client is None:
        return
    try:
        client.stop()
    except Exception:  # noqa: BLE001 - best effort on shutdown
        log.debug("stopping ZooKeeper client failed", exc_info=True)
    try:
        client.close()
    except Exception:  # noqa: BLE001
        log.debug("closing ZooKeeper client failed", exc_info=True)


def _connection_errors() -> tuple:
    """kazoo's errors of a lost connection or session (not of the request itself)."""
    try:
        from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, SessionExpiredError
    except ImportError:  # the zookeeper extra is not installed: no worker meets them
        return ()
    return (ConnectionClosedError, ConnectionLoss, SessionExpiredError)


_CONNECTION_ERRORS = _connection_errors()


def is_connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` is kazoo's error of a lost connection or an expired session, which
    the client's reconnection cures (worth a line in the log, not a traceback)."""
    return isinstance(exc, _CONNECTION_ERRORS)


class EventWorker:
    """One daemon thread running submitted callables in order.

    Exceptions of a callable are logged (with its name) and do not stop the worker: a
    lost connection or session as one WARNING line (its users redo their work when the
    client is CONNECTED again), anything else with its traceback.
    ``stop()`` lets queued work finish, then joins the thread.
    """

    _STOP = object()

    def __init__(self, name: str):
        self.name = name
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = False

    def start(self) -> "EventWorker":
        """Start the thread (idempotent)."""
        if not self._started:
            self._started = True
            self._thread.start()
        return self

    def submit(self, fn, *args) -> None:
        """Queue ``fn(*args)``; safe from any thread, including kazoo's."""
        self._queue.put((fn, args))

    def on_worker_thread(self) -> bool:
        """True when called from the worker's own thread."""
        return threading.current_thread() is self._thread

    def _run(self):
        while True:
            item = self._queue.get()
            if item is self._STOP:
                return
            fn, args = item
            try:
                fn(*args)
            except _CONNECTION_ERRORS as exc:
                # the session was lost or expired under the handler: every user of a
                # worker re-reads its state when the client is CONNECTED again
                log.warning("%s: event %s interrupted by the ZooKeeper connection (%s); "
                            "it is redone once the client reconnects", self.name,
                            getattr(fn, "__name__", fn), type(exc).__name__)
            except Exception:  # noqa: BLE001 - a handler bug must not kill the worker
                log.exception("%s: event %s failed", self.name, getattr(fn, "__name__", fn))

    def stop(self, timeout: float = 10.0) -> None:
        """Finish queued work, then stop the thread."""
        if self._started and self._thread.is_alive():
            self._queue.put(self._STOP)
            if not self.on_worker_thread():
                self._thread.join(timeout)
