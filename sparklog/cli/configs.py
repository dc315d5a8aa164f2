"""``sparklog configs --entity-type users`` (Kafka's kafka-configs.sh for SCRAM users).

Examples::

    sparklog configs --alter --entity-type users --entity-name alice \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]'
    sparklog configs --alter --entity-type users --entity-name alice --delete-config SCRAM-SHA-512
    sparklog configs --describe --entity-type users [--entity-name alice]

The broker salts and hashes the password (only the result is stored); it takes a
password only over an encrypted listener (SSL, SASL_SSL) or loopback. Topic configs are
changed with ``sparklog topics alter``.
"""

from __future__ import annotations

import re

from ..errors import InvalidArgumentError
from .clientargs import add_bootstrap, session

_ITEM = re.compile(r"\s*([A-Za-z0-9_.-]+)\s*=\s*(\[[^\]]*\]|[^,]*)\s*(?:,|$)")


def add_parser(subparsers) -> None:
    """Register ``configs``."""
    p = subparsers.add_parser("configs", help="SCRAM credentials of users (kafka-configs)",
                              description=__doc__.split("\n\n")[0])
    add_bootstrap(p)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--alter", action="store_true")
    what.add_argument("--describe", action="store_true")
    p.add_argument("--entity-type", required=True, choices=["users", "topics", "clients",
                                                            "brokers"])
    p.add_argument("--entity-name", default=None)
    p.add_argument("--add-config", default=None, metavar="K=V[,K=[a=b,...]]")
    p.add_argument("--delete-config", default=None, metavar="K[,K]")
    p.set_defaults(func=run)


def parse_add_config(text: str) -> dict[str, str | dict]:
    """``SCRAM-SHA-256=[iterations=8192,password=x],k=v`` -> ``{"SCRAM-SHA-256":
    {"iterations": "8192", "password": "x"}, "k": "v"}``."""
    out: dict = {}
    pos = 0
    while pos < len(text):
        m = _ITEM.match(text, pos)
        if m is None or m.end() == pos:
            raise InvalidArgumentError(f"--add-config: cannot parse {text[pos:][:40]!r}")
        key, value = m.group(1), m.group(2).strip()
        if value.startswith("["):
            inner = {}
            for part in filter(None, value[1:-1].split(",")):
                k, sep, v = part.partition("=")
                if not sep:
                    raise InvalidArgumentError(f"--add-config {key}: {part!r} is not k=v")
                inner[k.strip()] = v.strip()
            out[key] = inner
        else:
            out[key] = value
        pos = m.end()
    return out


def run(args) -> int:
    """Run the action; the exit status."""
    if args.entity_type != "users":
        raise InvalidArgumentError(
            f"--entity-type {args.entity_type}: sparklog configs manages users' SCRAM "
            "credentials; topic configs are changed with 'sparklog topics alter' "
            "(client quotas are not implemented)")
    with session(args) as s:
        admin = s.admin()
        if args.describe:
            users = admin.describe_user_scram_credentials(
                [args.entity_name] if args.entity_name else None)
            for user, mechanisms in users.items():
                shown = ",".join(mechanisms)
                print(f"SCRAM credential configs for user-principal '{user}' are {shown}")
            return 0
        if not args.entity_name:
            raise InvalidArgumentError("--alter needs --entity-name")
        upserts, deletes = [], []
        for mechanism, value in parse_add_config(args.add_config or "").items():
            if not isinstance(value, dict) or "password" not in value:
                raise InvalidArgumentError(
                    f"--add-config {mechanism}: give [password=...] (and iterations=...)")
            upserts.append((args.entity_name, mechanism.upper(), value["password"],
                            int(value.get("iterations", 4096))))
        for mechanism in filter(None, (m.strip() for m in
                                       (args.delete_config or "").split(","))):
            deletes.append((args.entity_name, mechanism.upper()))
        if not upserts and not deletes:
            raise InvalidArgumentError("--alter needs --add-config or --delete-config")
        admin.alter_user_scram_credentials(upserts, deletes)
        print(f"Completed updating config for user {args.entity_name}.")
        return 0
