"""``sparklog broker start``: run a broker in the foreground (Kafka's kafka-server-start).

::

    sparklog broker start --storage file:///data/log [--listen 127.0.0.1:9092]
        [--config broker.properties] [--override key=value ...] [--metrics-port 19100]
        [--zookeeper HOST:PORT[,...][/chroot] --broker-id N]   (cluster mode)

Properties use Kafka's names (see ``sparklog/server/config.py``); command-line
flags win over ``--override``, which wins over the file. Once listening the broker
prints one line ``sparklog broker <id> listening on <host>:<port>`` on stdout. SIGTERM
or SIGINT shut it down gracefully (drain, flush, sync, release leases); a second signal
exits at once.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys

from ..errors import InvalidConfigError

log = logging.getLogger(__name__)


def add_parser(subparsers) -> None:
    """Register ``broker start``."""
    parser = subparsers.add_parser("broker", help="run a broker",
                                   description="Run a sparklog broker.")
    sub = parser.add_subparsers(dest="broker_command", metavar="ACTION")
    start = sub.add_parser("start", help="start a broker in the foreground")
    start.add_argument("--storage", required=True,
                       help="storage root URL (file:///path, hdfs://nn/path, webhdfs://...)")
    start.add_argument("--listen", default=None,
                       help="HOST:PORT to listen on (default listeners, 127.0.0.1:9092)")
    start.add_argument("--config", default=None, help="broker.properties file (Kafka names)")
    start.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="set one broker property (repeatable)")
    start.add_argument("--metrics-port", type=int, default=None,
                       help="serve Prometheus metrics on this port (0: any free port)")
    start.add_argument("--broker-id", type=int, default=None, help="broker.id")
    start.add_argument("--zookeeper", default=None, metavar="HOST:PORT[,...][/chroot]",
                       help="cluster mode: zookeeper.connect (brokers sharing the storage "
                            "root coordinate there; see docs/cluster.md)")
    start.set_defaults(func=run)
    parser.set_defaults(func=lambda args: parser.print_help() or 2)


def build_props(args) -> dict:
    """Broker properties from the file, the overrides and the flags (in that order)."""
    from ..server.config import load_properties

    props = load_properties(args.config) if args.config else {}
    for item in args.override:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidConfigError(f"--override {item!r} is not KEY=VALUE")
        props[key.strip()] = value.strip()
    if args.listen:
        props["listeners"] = args.listen
    if args.metrics_port is not None:
        props["metrics.port"] = args.metrics_port
    if args.broker_id is not None:
        props["broker.id"] = args.broker_id
    if args.zookeeper:
        props["zookeeper.connect"] = args.zookeeper
    return props


async def _serve(storage: str, props: dict) -> int:
    from ..server import Broker, BrokerConfig

    # what start-up imported lives as long as the process: frozen out of the collector's
    # generations, a full collection walks only what serving allocates (a shorter pause)
    gc.collect()
    gc.freeze()
    broker = Broker(storage, BrokerConfig.from_props(props))
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = 0

    def on_signal(signum):
        nonlocal signals
        signals += 1
        if signals > 1:
            log.error("second signal %d: exiting without a clean shutdown", signum)
            os._exit(1)
        log.info("signal %d: shutting down", signum)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        address = await broker.start()
    except BaseException:
        await broker.stop()
        raise
    print(f"sparklog broker {broker.broker_id} listening on {address}", flush=True)
    for listener in broker.security.listeners[1:]:
        print(f"listener {listener.name} ({listener.protocol}) on "
              f"{broker.listener_addresses[listener.name]}", flush=True)
    await stop.wait()
    await broker.stop()
    return 0


def run(args) -> int:
    """Entry point of ``sparklog broker start``."""
    props = build_props(args)
    if not logging.getLogger().isEnabledFor(logging.INFO) and args.log_level.upper() == "WARNING":
        logging.getLogger("sparklog").setLevel(logging.INFO)  # a server logs its life
    return asyncio.run(_serve(args.storage, props))


if __name__ == "__main__":  # pragma: no cover
    from .main import main

    sys.exit(main(["broker", *sys.argv[1:]]))
