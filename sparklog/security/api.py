"""The broker's security APIs: DescribeAcls, CreateAcls, DeleteAcls (kafka-acls),
DescribeUserScramCredentials, AlterUserScramCredentials, DescribeClientQuotas and
AlterClientQuotas (kafka-configs --entity-type users|clients). :class:`SecurityApis`
binds them to what they use: the broker's ``security``
(:class:`~sparklog.security.session.BrokerSecurity`) and ``run_io``.

AlterUserScramCredentials carries the password (sparklog's variant of Kafka's API,
whose client sends the salted password): the broker salts and hashes it and stores only
the result. Send it over TLS only; the broker refuses it on a connection that is not
encrypted, unless the connection is loopback.
"""

from __future__ import annotations

import functools

from ..errors import InvalidArgumentError, SecurityDisabledError, SparklogError
from ..protocol.apis import ApiKey
from ..protocol.codec import error_fields
from .acl import AclBinding, AclFilter
from .scram import ScramCredential

_OK = {"error_code": 0, "error_message": ""}


def _authorizer(apis):
    if apis.security is None or apis.security.authorizer is None:
        raise SecurityDisabledError("no authorizer is configured (authorizer.class.name): "
                                    "ACLs are not enforced and cannot be managed")
    return apis.security.authorizer


async def describe_acls(apis, body, ctx) -> dict:
    """The bindings the filter selects."""
    authorizer = _authorizer(apis)
    found = await apis.run_io(authorizer.describe, AclFilter(**body["filter"]))
    return {**_OK, "acls": [b.to_dict() for b in found]}


async def create_acls(apis, body, ctx) -> dict:
    """Add bindings (each answered on its own)."""
    authorizer = _authorizer(apis)
    results, good = [], []
    for item in body["creations"]:
        try:
            good.append(AclBinding(**item))
            results.append(dict(_OK))
        except InvalidArgumentError as exc:
            results.append(error_fields(exc))
    if good:
        await apis.run_io(authorizer.add, good)
    return {**_OK, "results": results}


async def delete_acls(apis, body, ctx) -> dict:
    """Remove the bindings each filter selects."""
    authorizer = _authorizer(apis)
    results = []
    for flt in body["filters"]:
        try:
            removed = await apis.run_io(authorizer.remove, AclFilter(**flt))
            results.append({**_OK, "acls": [b.to_dict() for b in removed]})
        except SparklogError as exc:
            results.append({**error_fields(exc), "acls": []})
    return {**_OK, "results": results}


async def describe_scram(apis, body, ctx) -> dict:
    """Users and the SCRAM mechanisms they have credentials for (never the
    credentials)."""
    users = await apis.run_io(apis.security.store.users)
    names = body["users"] if body["users"] is not None else list(users)
    return {**_OK, "users": [
        {"name": n, "mechanisms": users.get(n, []), **_OK} if n in users else
        {"name": n, "mechanisms": [], "error_code": 91,
         "error_message": f"user {n!r} has no SCRAM credential"} for n in names]}


async def alter_scram(apis, body, ctx) -> dict:
    """Add/replace (upsertions) and delete SCRAM credentials."""
    session = getattr(ctx, "session", None)
    listener = session.listener if session is not None else None
    plain = listener is not None and not listener.tls and not listener.loopback
    store = apis.security.store
    results = []
    for item in body["upsertions"]:
        try:
            if plain and listener is not None:
                raise InvalidArgumentError(
                    f"refusing a password sent over listener {listener.name} "
                    f"({listener.protocol}): use an SSL or SASL_SSL listener")
            credential = await apis.run_io(lambda: ScramCredential.create(
                item["mechanism"], item["password"], item["iterations"]))
            await apis.run_io(store.set_credential, item["name"], item["mechanism"],
                                credential)
            results.append({"name": item["name"], **_OK})
        except SparklogError as exc:
            results.append({"name": item["name"], **error_fields(exc)})
    for item in body["deletions"]:
        found = await apis.run_io(store.delete_credential, item["name"], item["mechanism"])
        results.append({"name": item["name"], **(_OK if found else {
            "error_code": 91, "error_message":
                f"user {item['name']!r} has no {item['mechanism']} credential"})})
    return {**_OK, "results": results}


async def describe_quotas(apis, body, ctx) -> dict:
    """Quotas of every entity (or of one type, or one entity)."""
    doc = await apis.run_io(apis.security.quotas.settings, True)
    entries = []
    for entity_type, entities in sorted(doc.items()):
        if body["entity_type"] not in (None, entity_type):
            continue
        for name, values in sorted(entities.items()):
            if body["entity_name"] in (None, name):
                entries.append({"entity_type": entity_type, "entity_name": name,
                                "values": values})
    return {**_OK, "entries": entries}


async def alter_quotas(apis, body, ctx) -> dict:
    """Set and remove quotas (each entry answered on its own)."""
    results = []
    for e in body["entries"]:
        item = {"entity_type": e["entity_type"], "entity_name": e["entity_name"]}
        try:
            await apis.run_io(apis.security.quotas.alter, e["entity_type"],
                                e["entity_name"], e["set"], e["remove"])
            results.append({**item, **_OK})
        except SparklogError as exc:
            results.append({**item, **error_fields(exc)})
    return {**_OK, "results": results}


#: api key -> handler
HANDLERS = {
    ApiKey.DESCRIBE_CLIENT_QUOTAS: describe_quotas,
    ApiKey.ALTER_CLIENT_QUOTAS: alter_quotas,
    ApiKey.DESCRIBE_ACLS: describe_acls,
    ApiKey.CREATE_ACLS: create_acls,
    ApiKey.DELETE_ACLS: delete_acls,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: describe_scram,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: alter_scram,
}

__all__ = ["HANDLERS"]


class SecurityApis:
    """The security handlers with their collaborators: ``security`` (the broker's
    :class:`~sparklog.security.session.BrokerSecurity`) and ``run_io`` (runs a blocking
    call on the broker's I/O threads)."""

    def __init__(self, security, run_io):
        self.security = security
        self.run_io = run_io

    def handlers(self) -> dict:
        """api key -> ``handler(body, ctx)``."""
        return {key: functools.partial(fn, self) for key, fn in HANDLERS.items()}
