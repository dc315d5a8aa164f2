"""Arguments shared by the client tools (topics, produce, consume, groups).

``--bootstrap-server`` takes ``host:port[,host:port]`` as Kafka's tools do (default: the
``SPARKLOG_BOOTSTRAP_SERVERS`` environment variable, else ``127.0.0.1:9092``), or a
storage URI (``file:///path``) to run an embedded broker for the command's duration.
``--property key=value`` options are Kafka's console-tool properties.
``--command-config FILE`` is a client properties file, as Kafka's tools take it:
``security.protocol``, ``ssl.truststore.location`` (a PEM CA file),
``ssl.keystore.location`` (a PEM file with the client's key and certificate),
``ssl.key.password``, ``sasl.mechanism`` and ``sasl.jaas.config`` (its ``username``
and ``password``), or kafka-python's names (``ssl.cafile``, ``sasl.plain.username`` ...).
"""

from __future__ import annotations

import os

from ..errors import InvalidArgumentError

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def add_bootstrap(parser) -> None:
    """Add ``--bootstrap-server``."""
    parser.add_argument(
        "--bootstrap-server", dest="bootstrap_server", metavar="HOST:PORT",
        default=os.environ.get("SPARKLOG_BOOTSTRAP_SERVERS", DEFAULT_BOOTSTRAP),
        help="broker address(es), or a storage URI (file:///path) for an embedded broker "
             "(default $SPARKLOG_BOOTSTRAP_SERVERS or %(default)s)")
    parser.add_argument(
        "--command-config", dest="command_config", metavar="FILE", default=None,
        help="client properties file: security.protocol, ssl.truststore.location, "
             "sasl.mechanism, sasl.jaas.config ... (TLS and SASL)")


def add_topic(parser, required: bool = True) -> None:
    """Add the topic as Kafka's tools take it (``--topic NAME``) or positionally
    (``TOPIC``); :func:`topic_of` reconciles the two."""
    parser.add_argument("topic_pos", nargs="?", metavar="TOPIC", help="topic name")
    parser.add_argument("--topic", help="topic name (same as TOPIC)")
    parser.set_defaults(topic_required=required)


def topic_of(args) -> str | None:
    """The topic given by :func:`add_topic`'s arguments; InvalidArgumentError when two
    different ones are given, or none and one is required."""
    if args.topic and args.topic_pos and args.topic != args.topic_pos:
        raise InvalidArgumentError(
            f"two different topics given: {args.topic_pos!r} and --topic {args.topic!r}")
    topic = args.topic or args.topic_pos
    if topic is None and getattr(args, "topic_required", False):
        raise InvalidArgumentError("a topic is required (--topic NAME)")
    return topic


def add_console_args(parser, client: str, properties_help: str, client_help: str) -> None:
    """Add what the console tools (``produce``, ``consume``) share: the topic
    (``--topic NAME`` or ``TOPIC``), ``--bootstrap-server``, repeatable ``--property
    key=value`` (the tool's own properties) and repeatable ``--<client>-property
    key=value`` (configs of the ``client``, ``producer`` or ``consumer``, with Kafka's
    names)."""
    add_topic(parser)
    add_bootstrap(parser)
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help=properties_help)
    parser.add_argument(f"--{client}-property", action="append", default=[],
                        metavar="KEY=VALUE", help=client_help)


def console_properties(items, known) -> dict:
    """``--property`` values as a dict; InvalidArgumentError names any key not in
    ``known``."""
    props = parse_key_values(items)
    unknown = set(props) - set(known)
    if unknown:
        raise InvalidArgumentError(
            f"unknown --property {sorted(unknown)}; known: {sorted(known)}")
    return props


def parse_key_values(items, what: str = "--property") -> dict:
    """``["a=1", "b=2"]`` -> ``{"a": "1", "b": "2"}``; InvalidArgumentError otherwise."""
    out = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidArgumentError(f"{what} {item!r} is not of the form key=value")
        out[key.strip()] = value
    return out


def client_configs(items, what: str) -> dict:
    """``--producer-property``/``--consumer-property`` values with Kafka's dotted names
    (``linger.ms=5``) -> client keyword arguments (``linger_ms=5``)."""
    out = {}
    for key, value in parse_key_values(items, what).items():
        name = key.replace(".", "_")
        try:
            out[name] = int(value)
        except ValueError:
            low = value.lower()
            out[name] = True if low == "true" else False if low == "false" else value
    return out


def bool_property(props: dict, key: str, default: bool = False) -> bool:
    """A true/false property; InvalidArgumentError naming the key otherwise."""
    value = props.get(key)
    if value is None:
        return default
    low = value.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise InvalidArgumentError(f"property {key}={value!r} must be true or false")


def unescape(text: str) -> str:
    """Interpret ``\\t``, ``\\n`` and ``\\\\`` in a separator given on the command line."""
    return text.encode("latin-1", "backslashreplace").decode("unicode_escape")


def command_config(args) -> dict:
    """The client configs of ``--command-config`` ({} without it)."""
    path = getattr(args, "command_config", None)
    if not path:
        return {}
    from ..server.config import parse_properties

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read --command-config {path}: {exc}") from None
    from ..security.client import security_properties

    return security_properties(parse_properties(text, path), what=f"--command-config {path}")


def session(args):
    """A :class:`sparklog.session.Session` for ``--bootstrap-server`` (and
    ``--command-config``)."""
    from ..session import connect

    return connect(args.bootstrap_server, client_configs=command_config(args))
