"""NameNodeProbe: a long-lived HDFS client's watch on its NameNodes (a broker's).

Why: a client that made no NameNode call while the active NameNode's *host* was lost
sends its next call over its still "open" connection to that host, which answers
neither with data nor with a reset. Hadoop's IPC client waits ``ipc.client.rpc-timeout.ms``
on that connection before its failover proxy tries the other NameNode, so a broker that
opens or rolls a segment right after a NameNode failover stalled for up to that timeout
*after* the failover had ended (docs/deploy.md, "Host-loss failover"). Hadoop's own
knobs do not cover it: ``ipc.client.ping`` pings only while a call is waiting,
``ipc.client.connection.maxidletime`` closes idle connections but not a busy dead one,
and a failover proxy learns of a failover only through a failed call of its own.

What: one daemon thread per NameNode of the nameservice (one for a plain
``hdfs://host:port``) calls ``ClientProtocol.getServerDefaults`` on that NameNode every
``interval`` seconds, without a failover proxy. It is the cheapest call that tells the
active NameNode from a standby: the NameNode checks the operation category (a standby
refuses it with ``StandbyException``) and answers a value it keeps in memory, without the
namespace lock. The call goes over the same IPC connection as every other NameNode call
of the process for the same user and settings (Hadoop shares connections by address,
user, protocol and timeouts), so:

* a connection that died with its host is found within ``ipc.client.rpc-timeout.ms`` of
  the loss (the probe's call times out and Hadoop closes the connection, failing every
  call waiting on it at once), not on the first call after the failover;
* while a NameNode does not answer, the probe calls it over a connection of its own:
  on a lost host every attempt to connect holds that address's shared connection for
  ``ipc.client.connect.timeout``, and the calls other threads still send there (on
  their way to the other NameNode) would each wait out the probe's attempts first;
* the probe knows which NameNode is active within ``interval`` of its becoming active.
  :class:`~sparklog.storage.hdfs.HadoopFileIO` then gives the clients it creates from
  that moment (new segments' writers, its namespace client) that NameNode first, and
  points the failover proxies of its open writers at it (:func:`steer`, no call).

Costs: one ``getServerDefaults`` per NameNode per ``interval`` per process that runs a
probe (brokers only: Spark tasks and one-off commands do not start one): with two
NameNodes, three brokers and the default 1 s, six calls a second, against a NameNode's
tens of thousands.

It never raises into its user: every failure is a state ("standby", "unavailable: ...").
State changes are logged once each (a NameNode that stops answering or becomes active:
WARNING; one that answers again: INFO), not every interval. :meth:`close` stops the
threads and waits for a call in flight (bounded by the IPC timeouts), then releases the
proxies.
"""

from __future__ import annotations

import functools
import logging
import threading
import time

from sparklog.storage import jvm

log = logging.getLogger(__name__)

ACTIVE = "active"
STANDBY = "standby"
#: how long close() waits for a probe thread blocked in a call beyond the IPC timeouts
_JOIN_SLACK = 2.0


def namenode_addresses(conf, authority: str) -> list[tuple[str, object]]:
    """``[(NameNode id, InetSocketAddress), ...]`` of ``authority`` in ``conf``'s order:
    the NameNodes of an HA nameservice (``dfs.ha.namenodes.<ns>``), else the one
    ``host:port`` the authority names (port 8020 when absent)."""
    util = jvm.jclass("org.apache.hadoop.hdfs.DFSUtilClient")
    ha = util.getHaNnRpcAddresses(conf).get(authority)
    if ha is not None and not ha.isEmpty():
        return [(str(e.getKey()), e.getValue()) for e in ha.entrySet()]
    net = jvm.jclass("org.apache.hadoop.net.NetUtils")
    return [(authority, net.createSocketAddr(authority, 8020))]


def same_address(a, b) -> bool:
    """Whether two ``InetSocketAddress``es name one NameNode (equal, or the same host
    name and port where one of them is not resolved)."""
    return bool(a.equals(b)) or (
        a.getPort() == b.getPort() and str(a.getHostString()) == str(b.getHostString()))


@functools.cache
def _descriptor_reflection():
    """The reflective handles :func:`steer` uses (looked up once per process): the
    ``RetryInvocationHandler``'s descriptor field, the descriptor's ``getProxyInfo``,
    ``getFailoverCount`` and ``failover``, a ``Method`` for the latter's log line (of a
    failover that lost a race with another one), and the NameNode proxy-info class."""
    field = jvm.jclass("org.apache.hadoop.io.retry.RetryInvocationHandler").class_ \
        .getDeclaredField("proxyDescriptor")
    cls = jvm.jclass("org.apache.hadoop.io.retry.RetryInvocationHandler$ProxyDescriptor").class_
    long_t, int_t = jvm.jclass("java.lang.Long").TYPE, jvm.jclass("java.lang.Integer").TYPE
    info_of = cls.getDeclaredMethod("getProxyInfo")
    count_of = cls.getDeclaredMethod("getFailoverCount")
    failover = cls.getDeclaredMethod(
        "failover", long_t, jvm.jclass("java.lang.reflect.Method").class_, int_t)
    for m in (field, info_of, count_of, failover):
        m.setAccessible(True)
    method = jvm.jclass("org.apache.hadoop.hdfs.protocol.ClientProtocol").class_ \
        .getMethod("getServerDefaults")
    nn_info = jvm.jclass(
        "org.apache.hadoop.hdfs.server.namenode.ha.AbstractNNFailoverProxyProvider$NNProxyInfo")
    return field, info_of, count_of, failover, method, nn_info


def steer(namenode, address) -> bool:
    """Point an HA client's failover proxy (``DFSClient.getNamenode()``) at the NameNode
    at ``address`` without calling any NameNode; True when it points there (now or
    already), False when ``namenode`` is not a failover proxy over NameNodes (nothing
    changed then).

    Why not a call through the proxy: it goes to the proxy's current NameNode, the lost
    host, and waits there for a connect or RPC timeout first; calls of several clients
    to one address queue behind each other's connection attempts. Hadoop offers no
    public way to move a failover proxy, so this takes the one its own retries take:
    the ``RetryInvocationHandler``'s proxy descriptor fails over (the provider moves to
    its next NameNode, round robin, and makes that proxy without a call), as often as
    there are NameNodes until the current one is ``address``. A call already in flight
    on the old NameNode sees the failover count changed when it fails and retries on
    the current proxy instead of failing over again (Hadoop 3's ``ProxyDescriptor``)."""
    import jpype

    reflect = jvm.jclass("java.lang.reflect.Proxy")
    if not reflect.isProxyClass(namenode.getClass()):
        return False
    handler = reflect.getInvocationHandler(namenode)
    retry_cls = jvm.jclass("org.apache.hadoop.io.retry.RetryInvocationHandler")
    if not isinstance(handler, retry_cls):
        return False
    field, info_of, count_of, failover, method, nn_info = _descriptor_reflection()
    descriptor = field.get(handler)
    first = None
    for _ in range(16):  # a round of any nameservice's NameNodes, with room to spare
        info = info_of.invoke(descriptor)
        if not isinstance(info, nn_info):
            return False
        current = info.getAddress()
        if same_address(current, address):
            return True
        if first is None:
            first = current
        elif same_address(current, first):
            return False  # a whole round: ``address`` is none of the proxy's NameNodes
        failover.invoke(descriptor, jpype.JLong(count_of.invoke(descriptor)), method,
                        jpype.JInt(-1))
    return False


class NameNodeProbe:
    """Probe every NameNode of ``authority`` every ``interval`` seconds (see the module
    docstring).

    ``conf``: the Hadoop Configuration the process's clients use; ``run_as``: a
    ``fn(callable, *args)`` running a Java call as the clients' user (a Kerberos
    keytab login), or None for the process's login user; ``on_active``: called (on a
    probe thread, never raising into it) as ``on_active(nn, was)`` when NameNode ``nn``
    answers as active and ``was`` (None at the first sighting) did before.
    """

    def __init__(self, authority: str, conf, interval: float, *, run_as=None,
                 on_active=None, display: str | None = None):
        if interval <= 0:
            raise ValueError(f"probe interval must be > 0, got {interval}")
        self.authority = authority
        self.interval = float(interval)
        self.display = display or f"hdfs://{authority}"
        self._run_as = run_as
        self._on_active = on_active
        # the settings a failover proxy gives its per-NameNode proxies (its connection
        # retries), so that the probe's calls use the connection theirs use
        conf = jvm.jclass("org.apache.hadoop.conf.Configuration")(conf)
        conf.setInt("ipc.client.connect.max.retries",
                    conf.getInt("dfs.client.failover.connection.retries", 0))
        conf.setInt("ipc.client.connect.max.retries.on.timeouts",
                    conf.getInt("dfs.client.failover.connection.retries.on.timeouts", 0))
        self._conf = conf
        # a NameNode that stopped answering is probed over a connection of its own (one
        # ConnectionId field differs): on a lost host each connect attempt waits out
        # ipc.client.connect.timeout holding the connection's lock, and the clients'
        # calls still on their way off that NameNode would queue behind the probe's
        # attempts, one connect timeout each (Client.getConnection/addCall)
        apart = jvm.jclass("org.apache.hadoop.conf.Configuration")(conf)
        apart.setInt("ipc.client.connection.maxidletime",
                     conf.getInt("ipc.client.connection.maxidletime", 10000) + 1)
        self._apart_conf = apart
        # a call in flight ends within these (a connect attempt, then a read timeout)
        self._call_bound = (conf.getInt("ipc.client.connect.timeout", 20000)
                            + max(0, conf.getInt("ipc.client.rpc-timeout.ms", 0))) / 1000.0
        self.namenodes = namenode_addresses(conf, authority)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._proxies: dict[tuple[str, bool], object] = {}
        #: NameNode id -> "active", "standby", "unavailable: <why>" (None: not probed yet)
        self.states: dict[str, str | None] = {nn: None for nn, _ in self.namenodes}
        #: the NameNode that answered as active last (None: none yet)
        self.active: str | None = None
        #: probe calls made, per NameNode id
        self.calls: dict[str, int] = {nn: 0 for nn, _ in self.namenodes}
        self._confirmed: dict[str, float] = {}  # NameNode id -> its last "active" answer
        # the active NameNode changes only when the current one has not confirmed itself
        # for this long: an old active that still answers (paused, not yet fenced) next
        # to the new one does not make the probe flap between them
        self._hold = 2 * self.interval + 1.0

    # --- lifecycle --------------------------------------------------------------------
    def start(self) -> "NameNodeProbe":
        """Start one daemon thread per NameNode."""
        for nn, address in self.namenodes:
            t = threading.Thread(target=self._loop, args=(nn, address), daemon=True,
                                 name=f"sparklog-nn-probe-{nn}")
            self._threads.append(t)
            t.start()
        log.info("%s: probing NameNode(s) %s every %.1fs", self.display,
                 ", ".join(f"{nn} ({self._addr(a)})" for nn, a in self.namenodes),
                 self.interval)
        return self

    def close(self) -> None:
        """Stop probing: the threads end after their call in flight (each is bounded by
        ``ipc.client.connect.timeout`` plus ``ipc.client.rpc-timeout.ms``); then the
        proxies are released. Idempotent."""
        self._stop.set()
        for t in self._threads:
            t.join(self._call_bound + _JOIN_SLACK)
            if t.is_alive():
                log.warning("%s: NameNode probe thread %s still in a call after %.0fs; "
                            "left to end by itself", self.display, t.name,
                            self._call_bound + _JOIN_SLACK)
        with self._lock:
            proxies, self._proxies = dict(self._proxies), {}
        if any(t.is_alive() for t in self._threads):
            return  # a call still uses its proxy: the JVM releases it at exit
        rpc = jvm.jclass("org.apache.hadoop.ipc.RPC")
        for proxy in proxies.values():
            try:
                rpc.stopProxy(proxy)
            except Exception:  # noqa: BLE001 - releasing a proxy: nothing to save
                pass

    @property
    def running(self) -> bool:
        """True while any probe thread runs."""
        return any(t.is_alive() for t in self._threads)

    # --- probing ----------------------------------------------------------------------
    @staticmethod
    def _addr(address) -> str:
        return f"{address.getHostString()}:{address.getPort()}"

    def _proxy(self, nn: str, address, apart: bool = False):
        """The plain (no failover, no retries) ClientProtocol proxy of one NameNode: on
        the connection the process's clients share, or (``apart``) on one of its own."""
        proxy = self._proxies.get((nn, apart))
        if proxy is None:
            ugi_cls = jvm.jclass("org.apache.hadoop.security.UserGroupInformation")
            proxies = jvm.jclass("org.apache.hadoop.hdfs.NameNodeProxiesClient")
            proxy = proxies.createProxyWithAlignmentContext(
                address, self._apart_conf if apart else self._conf,
                ugi_cls.getCurrentUser(), False, None, None)
            with self._lock:
                if self._stop.is_set():
                    jvm.jclass("org.apache.hadoop.ipc.RPC").stopProxy(proxy)
                    raise RuntimeError("closed")
                self._proxies[(nn, apart)] = proxy
        return proxy

    def probe_once(self, nn: str, address) -> str:
        """Call ``getServerDefaults`` on one NameNode; its state: ``active``,
        ``standby`` or ``unavailable: <cause>``. A NameNode that was unavailable at
        its last call is called over a connection of its own until it answers again."""
        import jpype

        apart = (self.states.get(nn) or "").startswith("unavailable")

        def call():
            return self._proxy(nn, address, apart).getServerDefaults()

        try:
            if self._run_as is not None:
                self._run_as(call)
            else:
                call()
            return ACTIVE
        except jpype.JException as e:
            chain = jvm.exception_chain(e)
            if any(name == "StandbyException" for name, _ in chain):
                return STANDBY
            name, msg = chain[-1] if chain else ("?", "")
            line = msg.strip().splitlines()[0][:200] if msg.strip() else ""
            return f"unavailable: {name}: {line}" if line else f"unavailable: {name}"
        finally:
            self.calls[nn] += 1

    def _loop(self, nn: str, address) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                state = self.probe_once(nn, address)
            except Exception as e:  # noqa: BLE001 - the probe never raises into its user
                if self._stop.is_set():
                    break
                state = f"unavailable: {type(e).__name__}: {e}"
            if self._stop.is_set():
                break
            self._record(nn, address, state)
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def _record(self, nn: str, address, state: str) -> None:
        """Keep ``state``; log a change once; report a newly active NameNode."""
        now = time.monotonic()
        with self._lock:
            old = self.states.get(nn)
            self.states[nn] = state
            was = self.active
            if state == ACTIVE:
                self._confirmed[nn] = now
            became_active = state == ACTIVE and was != nn and (
                was is None or now - self._confirmed.get(was, 0.0) > self._hold)
            if became_active:
                self.active = nn
        where = f"{self.display}: NameNode {nn} ({self._addr(address)})"
        same_kind = old is not None and old.split(":")[0] == state.split(":")[0]
        if became_active:
            if was is None:
                log.info("%s is active", where)
            else:
                log.warning("%s is active now (was %s): new clients go to it first",
                            where, was)
            if self._on_active is not None:
                try:
                    self._on_active(nn, was)
                except Exception:  # noqa: BLE001 - a listener bug must not stop the probe
                    log.exception("%s: NameNode probe listener failed", self.display)
        elif not same_kind and old is not None:
            if state.startswith("unavailable"):
                log.warning("%s does not answer (%s)", where, state)
            else:
                log.info("%s answers again: %s", where, state)
        elif old is None and state.startswith("unavailable"):
            log.warning("%s does not answer (%s)", where, state)
