"""ACLs and the authorizer (Kafka's model).

An :class:`AclBinding` allows or denies a principal (``User:alice``, or ``User:*``) an
operation (Read, Write, Create, Delete, Alter, Describe, ClusterAction,
DescribeConfigs, AlterConfigs, IdempotentWrite, or All) on resources of one type
(Topic, Group, Cluster, or TransactionalId, which takes Write, Describe and All only)
named literally or by prefix (``LITERAL``: the name, or ``*`` for every resource;
``PREFIXED``: every name starting with it), from a host (``*`` or an IP address).

:class:`AclAuthorizer` decides as Kafka's does: a super user may do anything; a
matching DENY wins over any ALLOW; else a matching ALLOW allows, where Read, Write,
Delete and Alter imply Describe and AlterConfigs implies DescribeConfigs; a resource
no ACL names at all is allowed only with ``allow.everyone.if.no.acl.found=true``.
Every decision that refuses is written to the audit log
(:mod:`~sparklog.security.audit`). The broker gives the authorizer to its request
handlers (:mod:`~sparklog.security.enforce`); it is never a global.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass

from ..errors import InvalidArgumentError
from . import audit
from .store import SecurityStore

RESOURCE_TYPES = ("Topic", "Group", "Cluster", "TransactionalId")
OPERATIONS = ("All", "Read", "Write", "Create", "Delete", "Alter", "Describe",
              "ClusterAction", "DescribeConfigs", "AlterConfigs", "IdempotentWrite")
PATTERN_TYPES = ("LITERAL", "PREFIXED")
PERMISSIONS = ("Allow", "Deny")
#: the cluster resource's name (Kafka's)
CLUSTER = "kafka-cluster"
#: the operations a resource type takes where not all do (Kafka's AclCommand's rule)
_OPERATIONS_OF = {"TransactionalId": ("Write", "Describe", "All")}
#: an operation allowed implies these (Kafka's implications)
_IMPLIES = {"Describe": ("Read", "Write", "Delete", "Alter"),
            "DescribeConfigs": ("AlterConfigs",)}
#: how long the authorizer trusts its copy of the ACLs (changes made through another
#: broker or the store directly are seen within this)
REFRESH_SECONDS = 1.0


def _canonical(value: str, known: tuple, what: str) -> str:
    for k in known:
        if str(value).replace("_", "").lower() == k.lower():
            return k
    raise InvalidArgumentError(f"unknown {what} {value!r}; known: {', '.join(known)}")


@dataclass(frozen=True)
class AclBinding:
    """One ACL (see the module docstring)."""

    principal: str
    host: str
    operation: str
    permission: str
    resource_type: str
    resource_name: str
    pattern_type: str = "LITERAL"

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "operation", _canonical(self.operation, OPERATIONS, "operation"))
        set_(self, "permission", _canonical(self.permission, PERMISSIONS, "permission type"))
        set_(self, "resource_type", _canonical(self.resource_type, RESOURCE_TYPES,
                                               "resource type"))
        set_(self, "pattern_type", _canonical(self.pattern_type, PATTERN_TYPES,
                                              "pattern type").upper())
        if not self.principal.startswith("User:") or len(self.principal) <= 5:
            raise InvalidArgumentError(f"principal {self.principal!r} must be User:<name> "
                                       "or User:*")
        if not self.resource_name or not self.host:
            raise InvalidArgumentError("an ACL needs a resource name and a host ('*' for any)")
        if self.resource_type == "Cluster" and self.resource_name != CLUSTER:
            raise InvalidArgumentError(f"the cluster resource is named {CLUSTER!r}")
        only = _OPERATIONS_OF.get(self.resource_type)
        if only is not None and self.operation not in only:
            raise InvalidArgumentError(
                f"resource type {self.resource_type} takes the operations "
                f"{', '.join(only)}, not {self.operation}")

    def matches_resource(self, resource_type: str, name: str) -> bool:
        """True when this ACL names the resource (literally, by ``*`` or by prefix)."""
        if resource_type != self.resource_type:
            return False
        if self.pattern_type == "PREFIXED":
            return name.startswith(self.resource_name)
        return self.resource_name in ("*", name)

    def to_dict(self) -> dict:
        """The stored form."""
        return asdict(self)

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation},"
                f" permissionType={self.permission}) on {self.resource_type}:"
                f"{self.pattern_type}:{self.resource_name}")


@dataclass(frozen=True)
class AclFilter:
    """Selects bindings (``None`` matches anything), as kafka-acls --list/--remove do."""

    principal: str | None = None
    host: str | None = None
    operation: str | None = None
    permission: str | None = None
    resource_type: str | None = None
    resource_name: str | None = None
    pattern_type: str | None = None

    def matches(self, b: AclBinding) -> bool:
        """True when every set field equals the binding's."""
        for name, value in asdict(self).items():
            if value is None:
                continue
            have = getattr(b, name)
            if str(value).replace("_", "").lower() != str(have).replace("_", "").lower():
                return False
        return True


class AclAuthorizer:
    """Decides requests against the ACLs of a :class:`SecurityStore` (module docstring)."""

    def __init__(self, store: SecurityStore, *, super_users=frozenset(),
                 allow_if_no_acl: bool = False):
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._acls: list[AclBinding] = []
        self._doc: dict | None = None
        self._lock = threading.Lock()

    # --- ACLs ---------------------------------------------------------------------------
    def acls(self, refresh: bool = False) -> list[AclBinding]:
        """Every binding: the store's copy re-read in the background when older than
        :data:`REFRESH_SECONDS` (at once with ``refresh``, off the event loop only)."""
        if refresh:
            self.store.forget("acls")
        doc = self.store.cached("acls", REFRESH_SECONDS)
        with self._lock:
            if doc is not self._doc:  # parse once per copy read
                self._doc = doc
                self._acls = [AclBinding(**b) for b in doc.get("acls", [])]
            return self._acls

    def add(self, bindings: list[AclBinding]) -> None:
        """Store bindings (those already present are kept once)."""
        def add(doc):
            have = doc.setdefault("acls", [])
            for b in bindings:
                if b.to_dict() not in have:
                    have.append(b.to_dict())
            return doc
        self.store.update("acls", add)
        self.acls(refresh=True)

    def remove(self, flt: AclFilter) -> list[AclBinding]:
        """Delete the bindings a filter selects; return them."""
        removed: list[AclBinding] = []

        def drop(doc):
            keep: list[dict] = []
            dropped: list[dict] = []
            for d in doc.get("acls", []):
                (dropped if flt.matches(AclBinding(**d)) else keep).append(d)
            removed[:] = [AclBinding(**d) for d in dropped]
            doc["acls"] = keep
            return doc
        self.store.update("acls", drop)
        self.acls(refresh=True)
        return removed

    def describe(self, flt: AclFilter) -> list[AclBinding]:
        """The bindings a filter selects."""
        return [b for b in self.acls(refresh=True) if flt.matches(b)]

    # --- decisions --------------------------------------------------------------------------
    def allowed(self, principal: str, host: str, operation: str, resource_type: str,
                name: str, *, log_denial: bool = True) -> bool:
        """The decision for one operation on one resource (module docstring); a refusal
        is audited unless ``log_denial`` is False (a filtered listing)."""
        if principal in self.super_users:
            return True
        bindings = [b for b in self.acls() if b.matches_resource(resource_type, name)]
        if not bindings:
            ok = self.allow_if_no_acl
        else:
            mine = [b for b in bindings if b.principal in (principal, "User:*")
                    and b.host in ("*", host)]
            ops = (operation, "All") + _IMPLIES.get(operation, ())
            if any(b.permission == "Deny" and b.operation in (operation, "All")
                   for b in mine):
                ok = False
            else:
                ok = any(b.permission == "Allow" and b.operation in ops for b in mine)
        if not ok and log_denial:
            audit.denied(principal, host, operation, resource_type, name)
        return ok

    def allowed_any(self, principal: str, host: str, operation: str,
                    resource_type: str) -> bool:
        """True when some ALLOW binding gives ``operation`` on some resource of the type
        (Kafka's test for an idempotent producer without IdempotentWrite)."""
        if principal in self.super_users:
            return True
        return any(b.permission == "Allow" and b.operation in (operation, "All")
                   and b.resource_type == resource_type and b.principal in (principal, "User:*")
                   and b.host in ("*", host) for b in self.acls())


__all__ = ["AclAuthorizer", "AclBinding", "AclFilter", "CLUSTER", "OPERATIONS",
           "PATTERN_TYPES", "PERMISSIONS", "RESOURCE_TYPES"]
