"""``sparklog configs --entity-type users|clients`` (Kafka's kafka-configs.sh for SCRAM
users and client quotas).

Examples::

    sparklog configs --alter --entity-type users --entity-name alice \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]'
    sparklog configs --alter --entity-type users --entity-name alice --delete-config SCRAM-SHA-512
    sparklog configs --describe --entity-type users [--entity-name alice]
    sparklog configs --alter --entity-type clients --entity-name loader \
        --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
    sparklog configs --alter --entity-type users --entity-default \
        --add-config producer_byte_rate=10485760

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
    p.add_argument("--entity-default", action="store_true",
                   help="the default of every user / client id (quotas)")
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
    from ..security.quotas import DEFAULT, KINDS

    if args.entity_type not in ("users", "clients"):
        raise InvalidArgumentError(
            f"--entity-type {args.entity_type}: sparklog configs manages users (SCRAM "
            "credentials, quotas) and clients (quotas); topic configs are changed with "
            "'sparklog topics alter'")
    name = DEFAULT if args.entity_default else args.entity_name
    with session(args) as s:
        admin = s.admin()
        if args.describe:
            if args.entity_type == "users":
                users = admin.describe_user_scram_credentials([name] if name and
                                                              name != DEFAULT else None)
                for user, mechanisms in users.items():
                    print(f"SCRAM credential configs for user-principal '{user}' are "
                          f"{','.join(mechanisms)}")
            for (kind, entity), values in admin.describe_client_quotas(
                    args.entity_type, name).items():
                shown = ", ".join(f"{k}={v:g}" for k, v in sorted(values.items()))
                print(f"Quota configs for {kind[:-1]}-principal '{entity}' are {shown}")
            return 0
        if not name:
            raise InvalidArgumentError("--alter needs --entity-name (or --entity-default)")
        upserts, quotas = [], {}
        for key, value in parse_add_config(args.add_config or "").items():
            if key in KINDS:
                text = str(value)
                quotas[key] = float(text) if "." in text else int(text)
                continue
            if args.entity_type != "users" or not isinstance(value, dict) \
                    or "password" not in value:
                raise InvalidArgumentError(
                    f"--add-config {key}: give SCRAM-SHA-256/512=[password=...] (users) or "
                    f"a quota: {', '.join(KINDS)}")
            upserts.append((name, key.upper(), value["password"],
                            int(value.get("iterations", 4096))))
        removed = [m.strip() for m in (args.delete_config or "").split(",") if m.strip()]
        deletes = [(name, m.upper()) for m in removed if m not in KINDS]
        remove_quotas = [m for m in removed if m in KINDS]
        if not (upserts or deletes or quotas or remove_quotas):
            raise InvalidArgumentError("--alter needs --add-config or --delete-config")
        if upserts or deletes:
            admin.alter_user_scram_credentials(upserts, deletes)
        if quotas or remove_quotas:
            admin.alter_client_quotas(args.entity_type, name, quotas, remove_quotas)
        print(f"Completed updating config for {args.entity_type[:-1]} {name}.")
        return 0
