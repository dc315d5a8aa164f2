"""``sparklog groups list|describe|reset-offsets|delete`` (Kafka's
kafka-consumer-groups.sh).

``describe`` prints, per partition the group has committed: the committed offset, the
log end offset, the lag between them and the member that owns the partition now.

``reset-offsets --group G (--topic T[:P,P...] ... | --all-topics) SPEC [--execute]``
moves the group's committed offsets, as Kafka's ``--reset-offsets``: SPEC is one of
``--to-earliest``, ``--to-latest``, ``--to-current``, ``--to-offset N``,
``--shift-by N`` (from the committed offset), ``--to-datetime
YYYY-MM-DDTHH:mm:SS[.sss][zone]`` (the first offset at or after it; no zone: local
time) or ``--by-duration PnDTnHnMnS`` (that long before now). Offsets outside the
partition's log are clamped to its start or end. Without ``--execute`` it is a dry run
that only prints the new offsets. A group with active members is refused (stop its
consumers first), as Kafka does. ``--all-topics`` means every topic the group has
committed offsets for.

``delete --group G [--group G2 ...]`` deletes groups without active members, with
their committed offsets.

kafka-consumer-groups.sh's action flags work too: ``sparklog groups --list``,
``--describe``, ``--reset-offsets``, ``--delete``.
"""

from __future__ import annotations

import datetime
import re
import sys
import time

from ..errors import InvalidArgumentError, NonEmptyGroupError
from .clientargs import add_bootstrap, session

#: kafka-consumer-groups.sh's action flags -> the sub-command (sparklog.cli.main)
KAFKA_ACTION_FLAGS = {f"--{a}": a for a in ("list", "describe", "reset-offsets", "delete")}

_COLUMNS = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
            "CONSUMER-ID", "HOST", "CLIENT-ID"]


def add_parser(subparsers) -> None:
    """Register ``groups`` and its actions."""
    parser = subparsers.add_parser("groups",
                                   help="list, describe (lag), reset, delete consumer groups",
                                   description=__doc__.split("\n\n")[0],
                                   epilog=__doc__.split("\n\n")[-1])
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
    _add_reset_parser(actions)
    p = actions.add_parser("delete", help="delete groups without members, with their offsets")
    p.add_argument("--group", action="append", required=True,
                   help="group id, repeatable")
    add_bootstrap(p)
    p.set_defaults(func=delete)


def _add_reset_parser(actions) -> None:
    p = actions.add_parser("reset-offsets", help="move a group's committed offsets",
                           description=__doc__.split("\n\n")[2])
    p.add_argument("--group", required=True, help="group id")
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]",
                       help="a topic, all its partitions or those listed; repeatable")
    scope.add_argument("--all-topics", action="store_true",
                       help="every topic the group has committed offsets for")
    spec = p.add_mutually_exclusive_group(required=True)
    spec.add_argument("--to-earliest", action="store_true", help="the log start offset")
    spec.add_argument("--to-latest", action="store_true", help="the log end offset")
    spec.add_argument("--to-current", action="store_true", help="the committed offset")
    spec.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    spec.add_argument("--shift-by", type=int, metavar="N",
                      help="the committed offset plus N (negative: back)")
    spec.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                      help="the first offset at or after this time (ISO 8601)")
    spec.add_argument("--by-duration", metavar="PnDTnHnMnS",
                      help="the first offset at or after now minus this ISO 8601 duration")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true",
                      help="print the new offsets only (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    add_bootstrap(p)
    p.set_defaults(func=reset_offsets)


_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")


def parse_duration_ms(text: str) -> int:
    """ISO 8601 ``PnDTnHnMnS`` (Kafka's --by-duration) -> milliseconds."""
    m = _DURATION.fullmatch(text.strip().upper())
    if not m or text.strip().upper() in ("P", "PT"):
        raise InvalidArgumentError(
            f"--by-duration {text!r} is not an ISO 8601 duration like PT1H30M or P1DT2H")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return int(((days * 24 + hours) * 60 + minutes) * 60000 + seconds * 1000)


def parse_datetime_ms(text: str) -> int:
    """``YYYY-MM-DDTHH:mm:SS[.sss][Z|+hh:mm]`` (Kafka's --to-datetime; no zone: local
    time) -> ms since the epoch."""
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidArgumentError(
            f"--to-datetime {text!r} is not YYYY-MM-DDTHH:mm:SS.sss (optionally with a "
            "zone: Z or +hh:mm)") from None
    return int(when.timestamp() * 1000)


def _partitions(admin, args, committed) -> list:
    from ..clients.types import TopicPartition

    if args.all_topics:
        return sorted(committed)
    out: list = []
    for spec in args.topic:
        topic, _, parts = spec.partition(":")
        described = admin.describe_topics([topic])[0]
        existing = range(len(described.partitions))
        if parts:
            try:
                chosen = [int(p) for p in parts.split(",")]
            except ValueError:
                raise InvalidArgumentError(
                    f"--topic {spec!r}: partitions must be numbers (TOPIC:0,1)") from None
            bad = [p for p in chosen if p not in existing]
            if bad:
                raise InvalidArgumentError(f"--topic {spec!r}: topic {topic!r} has no "
                                           f"partition {bad[0]} (it has {len(existing)})")
        else:
            chosen = list(existing)
        out.extend(TopicPartition(topic, p) for p in chosen)
    return sorted(set(out))


def new_offsets(admin, args, tps, committed) -> dict:
    """``{tp: new offset}`` for reset-offsets' SPEC, clamped to each partition's log."""
    earliest = {tp: o.offset for tp, o in admin.list_offsets(
        {tp: "earliest" for tp in tps}).items()}
    latest = {tp: o.offset for tp, o in admin.list_offsets(
        {tp: "latest" for tp in tps}).items()}
    if args.to_datetime is not None or args.by_duration is not None:
        ts = parse_datetime_ms(args.to_datetime) if args.to_datetime is not None else \
            int(time.time() * 1000) - parse_duration_ms(args.by_duration)
        found = admin.list_offsets({tp: max(0, ts) for tp in tps})
        wanted = {tp: found[tp].offset if found[tp].offset >= 0 else latest[tp] for tp in tps}
    elif args.to_earliest:
        wanted = earliest
    elif args.to_latest:
        wanted = latest
    elif args.to_offset is not None:
        wanted = {tp: args.to_offset for tp in tps}
    else:  # --to-current, --shift-by: from the committed offset
        missing = [f"{tp.topic}-{tp.partition}" for tp in tps if tp not in committed]
        if missing:
            raise InvalidArgumentError(
                f"group {args.group!r} has no committed offset for {', '.join(missing)}: "
                "use --to-earliest, --to-latest, --to-offset or --to-datetime there")
        shift = args.shift_by or 0
        wanted = {tp: committed[tp].offset + shift for tp in tps}
    return {tp: min(max(wanted[tp], earliest[tp]), latest[tp]) for tp in tps}


def reset_offsets(args) -> int:
    """``groups reset-offsets``: see the module docstring."""
    from ..clients.types import TopicPartition

    with session(args) as s:
        admin = s.admin()
        for g in admin.describe_consumer_groups([args.group]):
            if g.members:
                raise NonEmptyGroupError(
                    f"assignments can only be reset if the group {args.group!r} is "
                    f"inactive, but the current state is {g.state} ({len(g.members)} "
                    "member(s)): stop its consumers first")
        committed = {TopicPartition(*tp): om for tp, om in
                     admin.list_consumer_group_offsets(args.group).items()}
        tps = _partitions(admin, args, committed)
        if not tps:
            raise InvalidArgumentError(f"group {args.group!r} has no committed offsets: "
                                       "name the topics with --topic")
        offsets = new_offsets(admin, args, tps, committed)
        if args.execute:
            admin.alter_consumer_group_offsets(args.group, offsets)
        else:
            print("WARN: no action was performed as the --execute option is missing "
                  "(a dry run: these are the offsets --execute would commit)",
                  file=sys.stderr)
    print(_table([["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]] +
                 [[args.group, tp.topic, tp.partition, o] for tp, o in offsets.items()]))
    return 0


def delete(args) -> int:
    """``groups delete``: delete groups without members."""
    with session(args) as s:
        s.admin().delete_consumer_groups(args.group)
    names = ", ".join(repr(g) for g in args.group)
    print(f"Deletion of requested consumer groups ({names}) was successful.")
    return 0


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
    the output format and committed transaction version)."""
    from ..spark.jobs import describe_application, list_applications

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
                         f"etl-{d.format}-txn{d.version}"])
    return rows
