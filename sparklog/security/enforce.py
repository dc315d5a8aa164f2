"""Which operation on which resource every API needs, and applying the authorizer's
answers to requests and responses (Kafka's rules).

:func:`authorize` wraps a request handler: a request whose principal may not use its
group or the cluster is refused as a whole (GROUP_/CLUSTER_AUTHORIZATION_FAILED); the
topics (and groups) of a request that the principal may not use are taken out of the
request before the handler runs and answered with TOPIC_AUTHORIZATION_FAILED
(GROUP_AUTHORIZATION_FAILED) beside the handler's answers for the others. The handler
never sees a refused topic, so a refusal says nothing of whether the topic exists;
listings (Metadata of every topic, OffsetFetch of every committed partition,
ListGroups) only show what the principal may describe.

=====================  =====================================================
API                    needs
=====================  =====================================================
Produce                Write on each topic
Fetch                  Read on each topic
ListOffsets            Describe on each topic
Metadata               Describe on each topic (Create on the cluster or the
                       topic to create one automatically)
CreateTopics           Create on the cluster or on the topic
DeleteTopics           Delete on each topic
DeleteRecords          Delete on each topic
DescribeConfigs        DescribeConfigs on each topic (Describe: the schema and
                       partition count, without the configs)
AlterConfigs           AlterConfigs on each topic
DescribeLog            Read on each topic (it names the segment files)
OffsetCommit           Read on the group, Read on each topic
OffsetFetch            Describe on the group, Describe on each topic
JoinGroup, SyncGroup,  Read on the group; JoinGroup's subscription keeps only
Heartbeat, LeaveGroup  the topics one may Describe (as Kafka's consumer, whose
                       Metadata leaves the others out), so an assignment never
                       names a topic Metadata would refuse
DescribeGroups         Describe on each group
DeleteGroups           Delete on each group
ListGroups             Describe on the cluster, else the groups one may describe
InitProducerId         with a transactional id: Write on that TransactionalId;
                       without: IdempotentWrite on the cluster, or Write on some
                       topic
DescribeAcls,          Describe on the cluster
DescribeUserScram...
CreateAcls,            Alter on the cluster
DeleteAcls, AlterUser
ScramCredentials
DescribeClientQuotas   DescribeConfigs on the cluster
AlterClientQuotas      AlterConfigs on the cluster
ApiVersions, Sasl*     nothing (before authentication)
=====================  =====================================================
"""

from __future__ import annotations

from ..errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from ..protocol.apis import ApiKey
from ..protocol.codec import error_fields
from .acl import CLUSTER

_TOPIC_DENIED = error_fields(TopicAuthorizationFailedError(
    "Not authorized to access topics: [Topic authorization failed.]"))
_GROUP_DENIED = error_fields(GroupAuthorizationFailedError(
    "Not authorized to access group: Group authorization failed."))


class _Check:
    """The authorizer bound to one request's principal and host."""

    def __init__(self, authorizer, ctx):
        from .session import principal_of

        self.authorizer = authorizer
        self.principal = principal_of(getattr(ctx, "session", None))
        self.host = ctx.client_host

    def __call__(self, operation: str, resource_type: str, name: str, *, quiet=False) -> bool:
        return self.authorizer.allowed(self.principal, self.host, operation, resource_type,
                                       name, log_denial=not quiet)

    def cluster(self, operation: str) -> None:
        if not self(operation, "Cluster", CLUSTER):
            raise ClusterAuthorizationFailedError(
                f"Cluster authorization failed: {self.principal} may not {operation} the "
                "cluster")

    def group(self, operation: str, group: str) -> None:
        if not self(operation, "Group", group):
            raise GroupAuthorizationFailedError(
                f"Not authorized to access group: {group}")


def _split(items, allowed) -> tuple[list, list]:
    keep: list = []
    refused: list = []
    for item in items:
        (keep if allowed(item) else refused).append(item)
    return keep, refused


def _topics(body, check, operation, denied_item):
    """Take the topics ``operation`` is refused on out of ``body['topics']``; return
    the response items of the refused ones."""
    keep, refused = _split(body["topics"], lambda t: check(operation, "Topic", t["name"]))
    body["topics"] = keep
    return [denied_item(t) for t in refused]


def _partitions(fields: dict):
    return lambda t: {"name": t["name"], "partitions": [
        {"partition": p["partition"], **_TOPIC_DENIED, **fields} for p in t["partitions"]]}


def _named(**fields):
    return lambda t: {"name": t["name"] if isinstance(t, dict) else t, **_TOPIC_DENIED,
                      **fields}


async def authorize(api_key: int, handler, body: dict, ctx, authorizer) -> dict | None:
    """Run ``handler(body, ctx)`` under the authorizer (module docstring)."""
    check = _Check(authorizer, ctx)
    extra: list = []       # response items of refused topics/groups
    listing = None         # filter of a listing's response items
    key = ApiKey(api_key)
    if key in (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
        pass
    elif key == ApiKey.PRODUCE:
        extra = _topics(body, check, "Write", _partitions(
            {"base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1}))
    elif key == ApiKey.FETCH:
        extra = _topics(body, check, "Read", _partitions(
            {"high_watermark": -1, "log_start_offset": -1, "records": b""}))
    elif key == ApiKey.LIST_OFFSETS:
        extra = _topics(body, check, "Describe", _partitions({"offset": -1, "timestamp": -1}))
    elif key == ApiKey.METADATA:
        if body["topics"] is None:
            listing = lambda t: check("Describe", "Topic", t["name"], quiet=True)  # noqa: E731
        else:
            keep, refused = _split(body["topics"], lambda n: check("Describe", "Topic", n))
            body["topics"] = keep
            extra = [_named(typed=False, partitions=[])(n) for n in refused]
            if body["allow_auto_topic_creation"] and \
                    not check("Create", "Cluster", CLUSTER, quiet=True):
                creatable, others = _split(keep, lambda n: check("Create", "Topic", n,
                                                                  quiet=True))
                if others:  # asked again without auto-creation, answers merged
                    body["topics"] = creatable
                    second = {**body, "topics": others, "allow_auto_topic_creation": False}
                    answer = await handler(second, ctx)
                    extra = answer["topics"] + extra
    elif key == ApiKey.CREATE_TOPICS:
        can_all = check("Create", "Cluster", CLUSTER, quiet=True)
        keep, refused = _split(body["topics"],
                               lambda t: can_all or check("Create", "Topic", t["name"]))
        body["topics"] = keep
        extra = [_named(num_partitions=-1)(t) for t in refused]
    elif key == ApiKey.DELETE_TOPICS:
        keep, refused = _split(body["topics"], lambda n: check("Delete", "Topic", n))
        body["topics"] = keep
        extra = [_named()(n) for n in refused]
    elif key == ApiKey.DELETE_RECORDS:
        extra = _topics(body, check, "Delete", _partitions({"low_watermark": -1}))
    elif key == ApiKey.DESCRIBE_CONFIGS:
        # Describe alone (which Read and Write imply) gives the partition count and
        # the schema, which clients need to read and write; the configs need more
        full, partial = _split(body["topics"],
                               lambda n: check("DescribeConfigs", "Topic", n, quiet=True))
        keep, refused = _split(partial, lambda n: check("Describe", "Topic", n))
        for n in refused:
            check("DescribeConfigs", "Topic", n)  # audited under the operation asked
        body["topics"] = full + keep
        extra = [_named()(n) for n in refused]
        if keep:
            stripped = set(keep)
            listing = lambda t: t.update(configs={}, explicit=[]) or True \
                if t["name"] in stripped else True  # noqa: E731
    elif key == ApiKey.ALTER_CONFIGS:
        extra = _topics(body, check, "AlterConfigs", _named())
    elif key == ApiKey.DESCRIBE_LOG:
        extra = _topics(body, check, "Read", _named(typed=False, partitions=[]))
    elif key == ApiKey.OFFSET_COMMIT:
        check.group("Read", body["group_id"])
        extra = _topics(body, check, "Read", _partitions({}))
    elif key == ApiKey.OFFSET_FETCH:
        check.group("Describe", body["group_id"])
        if body["topics"] is None:
            listing = lambda t: check("Describe", "Topic", t["name"], quiet=True)  # noqa: E731
        else:
            extra = _topics(body, check, "Describe", _partitions({"offset": -1}))
    elif key == ApiKey.FIND_COORDINATOR:  # Kafka: Describe on the group
        check.group("Describe", body["key"])
    elif key in (ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP):
        check.group("Read", body["group_id"])
        if key == ApiKey.JOIN_GROUP:  # the assignment names only describable topics
            body["topics"] = [t for t in body["topics"] if check("Describe", "Topic", t)]
    elif key == ApiKey.LIST_GROUPS:
        if not check("Describe", "Cluster", CLUSTER, quiet=True):
            listing = lambda g: check("Describe", "Group", g["group_id"], quiet=True)  # noqa
    elif key in (ApiKey.DESCRIBE_GROUPS, ApiKey.DELETE_GROUPS):
        operation = "Describe" if key == ApiKey.DESCRIBE_GROUPS else "Delete"
        keep, refused = _split(body["groups"], lambda g: check(operation, "Group", g))
        body["groups"] = keep
        extra = [{"group_id": g, **_GROUP_DENIED,
                  **({"state": ""} if key == ApiKey.DESCRIBE_GROUPS else {})} for g in refused]
    elif key == ApiKey.INIT_PRODUCER_ID and body.get("transactional_id") is not None:
        if not check("Write", "TransactionalId", body["transactional_id"]):
            raise TransactionalIdAuthorizationFailedError(
                f"Transactional Id authorization failed: {check.principal} may not Write "
                f"transactional id {body['transactional_id']!r}")
    elif key == ApiKey.INIT_PRODUCER_ID:
        if not check("IdempotentWrite", "Cluster", CLUSTER, quiet=True) and \
                not authorizer.allowed_any(check.principal, check.host, "Write", "Topic"):
            check.cluster("IdempotentWrite")
    elif key in (ApiKey.DESCRIBE_ACLS, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS):
        check.cluster("Describe")
    elif key in (ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS):
        check.cluster("Alter")
    elif key == ApiKey.DESCRIBE_CLIENT_QUOTAS:
        check.cluster("DescribeConfigs")
    elif key == ApiKey.ALTER_CLIENT_QUOTAS:
        check.cluster("AlterConfigs")
    else:  # an API without a rule is refused: every API must be listed above
        check.cluster("All")
    response = await handler(body, ctx)
    if response is None:
        return None
    items = "groups" if key in (ApiKey.LIST_GROUPS, ApiKey.DESCRIBE_GROUPS,
                                ApiKey.DELETE_GROUPS) else "topics"
    if listing is not None and items in response:
        response[items] = [t for t in response[items] if listing(t)]
    if extra:
        response.setdefault(items, []).extend(extra)
    return response


__all__ = ["authorize"]
