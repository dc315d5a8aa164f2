"""``sparklog acls --add|--remove|--list`` (Kafka's kafka-acls.sh).

Examples::

    sparklog acls --add --allow-principal User:alice --operation Read --operation Write \\
        --topic events
    sparklog acls --add --allow-principal User:alice --operation All --topic team- \\
        --resource-pattern-type prefixed
    sparklog acls --add --deny-principal User:mallory --operation All --topic '*'
    sparklog acls --add --allow-principal User:app --operation Read --group app
    sparklog acls --add --allow-principal User:app --operation Write --transactional-id app-1
    sparklog acls --list --topic events
    sparklog acls --remove --allow-principal User:alice --topic events --force
"""

from __future__ import annotations

import sys

from ..errors import InvalidArgumentError
from .clientargs import add_bootstrap, session


def add_parser(subparsers) -> None:
    """Register ``acls``."""
    p = subparsers.add_parser("acls", help="add, remove, list ACLs (kafka-acls)",
                              description=__doc__.split("\n\n")[0])
    add_bootstrap(p)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--add", action="store_true", help="add ACLs")
    what.add_argument("--remove", action="store_true", help="remove ACLs")
    what.add_argument("--list", action="store_true", help="list ACLs")
    p.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME")
    p.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME")
    p.add_argument("--principal", default=None, metavar="User:NAME",
                   help="--list: only the ACLs of this principal")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST")
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST")
    p.add_argument("--operation", action="append", default=[],
                   help="Read, Write, Create, Delete, Alter, Describe, DescribeConfigs, "
                        "AlterConfigs, IdempotentWrite, ClusterAction, All (repeatable)")
    p.add_argument("--topic", action="append", default=[])
    p.add_argument("--group", action="append", default=[])
    p.add_argument("--transactional-id", action="append", default=[],
                   help="a TransactionalId resource (Write: InitProducerId with that id)")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type", default="literal",
                   choices=["literal", "prefixed", "any", "match"])
    p.add_argument("--force", action="store_true", help="--remove without asking")
    p.set_defaults(func=run)


def _resources(args) -> list[tuple[str, str]]:
    from ..security.acl import CLUSTER

    out = [("Topic", t) for t in args.topic] + [("Group", g) for g in args.group] + \
        [("TransactionalId", t) for t in args.transactional_id]
    if args.cluster:
        out.append(("Cluster", CLUSTER))
    return out


def _bindings(args) -> list:
    from ..security.acl import AclBinding

    resources = _resources(args)
    if not resources:
        raise InvalidArgumentError("name a resource: --topic, --group, --transactional-id "
                                   "or --cluster")
    if not args.operation:
        raise InvalidArgumentError("--add needs at least one --operation")
    if args.resource_pattern_type not in ("literal", "prefixed"):
        raise InvalidArgumentError("--add takes --resource-pattern-type literal or prefixed")
    out = []
    for permission, principals, hosts in (("Allow", args.allow_principal, args.allow_host),
                                          ("Deny", args.deny_principal, args.deny_host)):
        for principal in principals:
            for host in hosts or ["*"]:
                for rtype, name in resources:
                    for op in args.operation:
                        out.append(AclBinding(principal, host, op, permission, rtype, name,
                                              args.resource_pattern_type.upper()))
    if not out:
        raise InvalidArgumentError("--add needs --allow-principal or --deny-principal")
    return out


def _filters(args) -> list:
    from ..security.acl import AclFilter

    pattern = None if args.resource_pattern_type in ("any", "match") \
        else args.resource_pattern_type.upper()
    principals: list[tuple[str | None, str | None]] = \
        [(p, "Allow") for p in args.allow_principal] + \
        [(p, "Deny") for p in args.deny_principal]
    if args.principal:
        principals.append((args.principal, None))
    out = []
    resources: list[tuple[str | None, str | None]] = [*_resources(args)] or [(None, None)]
    for rtype, name in resources:
        for principal, permission in principals or [(None, None)]:
            for op in args.operation or [None]:
                out.append(AclFilter(principal=principal, permission=permission,
                                     operation=op, resource_type=rtype, resource_name=name,
                                     pattern_type=pattern))
    return out


def run(args) -> int:
    """Run the action; the exit status."""
    with session(args) as s:
        admin = s.admin()
        if args.add:
            bindings = _bindings(args)
            admin.create_acls(bindings)
            for b in bindings:
                print(f"Adding ACL: {b}")
            return 0
        if args.remove:
            filters = _filters(args)
            if not args.force and not _resources(args) and not args.allow_principal \
                    and not args.deny_principal:
                raise InvalidArgumentError("--remove without a resource or principal removes "
                                           "every ACL: add --force to mean it")
            for b in admin.delete_acls(filters):
                print(f"Removed ACL: {b}")
            return 0
        seen = set()
        for flt in _filters(args):
            for b in admin.describe_acls(flt):
                if b not in seen:
                    seen.add(b)
                    print(b)
        if not seen:
            print("No ACLs found.", file=sys.stderr)
        return 0
