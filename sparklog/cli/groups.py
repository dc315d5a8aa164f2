"""``sparklog groups list|describe`` (Kafka's kafka-consumer-groups.sh).

``describe`` prints, per partition the group has committed: the committed offset, the
log end offset, the lag between them and the member that owns the partition now.
"""

from __future__ import annotations

import sys

from ..errors import InvalidArgumentError
from .clientargs import add_bootstrap, session

_COLUMNS = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
            "CONSUMER-ID", "HOST", "CLIENT-ID"]


def add_parser(subparsers) -> None:
    """Register ``groups`` and its actions."""
    parser = subparsers.add_parser("groups", help="list consumer groups, show their lag",
                                   description=__doc__.split("\n\n")[0])
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = actions.add_parser("list", help="list group ids")
    add_bootstrap(p)
    p.set_defaults(func=run)
    p = actions.add_parser("describe", help="offsets, log end offsets and lag of groups")
    p.add_argument("group_pos", nargs="?", metavar="GROUP")
    p.add_argument("--group", help="group id (same as GROUP)")
    p.add_argument("--all-groups", action="store_true", help="describe every group")
    p.add_argument("--output", action="append", default=[], metavar="URI",
                   help="also describe the exactly-once applications (sparklog etl) that "
                        "committed to this Delta table or Parquet directory (repeatable)")
    add_bootstrap(p)
    p.set_defaults(func=run)


def _table(rows) -> str:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(" ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
                     for r in rows)


def describe_rows(admin, group_id: str) -> list:
    """Rows of ``_COLUMNS`` for one group (committed partitions and owned ones)."""
    committed = admin.list_consumer_group_offsets(group_id)
    owners = {}
    for g in admin.describe_consumer_groups([group_id]):
        for m in g.members:
            for t in m.get("assignment", []):
                for p in t["partitions"]:
                    owners[(t["name"], p)] = m
    tps = sorted(set(committed) | set(owners))
    ends = admin.list_offsets({tp: "latest" for tp in tps}) if tps else {}
    rows = []
    for tp in tps:
        tp = tuple(tp)
        current = committed[tp].offset if tp in committed else None
        end = ends[tp].offset
        member = owners.get(tp, {})
        rows.append([group_id, tp[0], tp[1], "-" if current is None else current, end,
                     "-" if current is None else max(0, end - current),
                     member.get("member_id") or "-", member.get("client_host") or "-",
                     member.get("client_id") or "-"])
    return rows


def run(args) -> int:
    """Carry out one ``groups`` action."""
    with session(args) as s:
        admin = s.admin()
        if args.action == "list":
            for group_id, _state in admin.list_consumer_groups():
                print(group_id)
            return 0
        if args.group and args.group_pos and args.group != args.group_pos:
            raise InvalidArgumentError(
                f"two different groups given: {args.group_pos!r} and --group {args.group!r}")
        group = args.group or args.group_pos
        if args.all_groups:
            groups = [g for g, _ in admin.list_consumer_groups()]
        elif group:
            groups = [group]
        elif args.output:
            groups = []
        else:
            raise InvalidArgumentError("groups describe: give --group GROUP or --all-groups")
        known = dict(admin.list_consumer_groups())
        for i, group_id in enumerate(groups):
            if group_id not in known:
                raise InvalidArgumentError(f"consumer group {group_id!r} does not exist")
            rows = describe_rows(admin, group_id)
            if i:
                print()
            if not rows:
                print(f"Consumer group {group_id!r} has no committed offsets and no members.")
                continue
            print(_table([_COLUMNS] + rows))
        for i, uri in enumerate(args.output):  # applications keep offsets in their output
            if groups or i:
                print()
            rows = application_rows(admin, uri)
            print(_table([_COLUMNS] + rows) if rows else
                  f"No exactly-once application has committed to {uri}.")
    sys.stdout.flush()
    return 0


def application_rows(admin, output_uri: str) -> list:
    """Rows of ``_COLUMNS`` for the exactly-once applications committed to
    ``output_uri`` (their offsets live in the output, not in a group; CLIENT-ID shows
    the output format and committed version)."""
    from ..reader.job import describe_application, list_applications

    def ends(tps):
        return {tuple(tp): o.offset
                for tp, o in admin.list_offsets({tp: "latest" for tp in tps}).items()}

    rows = []
    for app in list_applications(output_uri):
        d = describe_application(output_uri, app, log_end_offsets=ends)
        for p in d.partitions:
            rows.append([app, p.topic, p.partition,
                         "-" if p.current_offset is None else p.current_offset,
                         "-" if p.log_end_offset is None else p.log_end_offset,
                         "-" if p.lag is None else p.lag, "-", "-",
                         f"etl-{d.format}-v{d.version}"])
    return rows
