"""Client quotas: ``producer_byte_rate``, ``consumer_byte_rate`` and ``request_percentage``
per user or client id (Kafka's names), enforced by throttling as Kafka does.

Quotas are set with ``sparklog configs --alter --entity-type users|clients
--entity-name NAME --add-config producer_byte_rate=1048576`` (``<default>`` names the
default of every user or client id) and kept in the security store's ``quotas``
document. The most specific quota applies, in Kafka's precedence (KIP-55, without its
(user, client id) pairs): the user's, else the default user's, else the client id's,
else the default client id's. A user quota (its own or the default) is shared by every
connection of the user whatever its client id, as in Kafka; a client-id quota by every
connection using that client id.

Each user or client id under a quota has a token bucket per quota holding at most
:data:`BURST_SECONDS` of its rate. A Produce request's bytes (a Fetch response's, for
consumers) are taken from it; ``request_percentage`` is a percentage of one thread's
time: every request's handling time (from its handler's start to its answer, less a
Fetch's long-poll wait) is taken from a bucket filling at ``request_percentage / 100``
seconds per second. When a bucket is in debt the broker stops reading the connection
for as long as the debt takes to repay (Kafka mutes the channel) and says so in the
response's ``throttle_time_ms`` (the larger delay when several quotas are in debt).
A client sending flat out thus gets the quota, plus at most one burst.

Buckets are kept only while they matter: a bucket that has refilled is the same as none
and is dropped, as is one unused for :data:`EXPIRE_SECONDS` (Kafka expires a quota's
sensors after an hour without use); at most :data:`MAX_BUCKETS` are kept, the least
recently used going first (their debt is forgiven), so clients rotating client ids
cost no memory that stays.
"""

from __future__ import annotations

import threading
import time

from ..errors import InvalidConfigError

KINDS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
#: a quota's value -> the bucket's rate (per second) of what is taken from it
_RATE = {"request_percentage": lambda percent: percent / 100.0}
ENTITY_TYPES = ("users", "clients")
DEFAULT = "<default>"
#: the largest burst a bucket holds, in seconds of its rate
BURST_SECONDS = 0.2
#: how long the quota settings read from the store are trusted
REFRESH_SECONDS = 1.0
#: a bucket unused this long is dropped whatever it holds (Kafka's quota sensors expire
#: after an hour of inactivity)
EXPIRE_SECONDS = 3600.0
#: the most buckets kept; beyond it the least recently used one is dropped
MAX_BUCKETS = 10_000
#: how often refilled and expired buckets are looked for
SWEEP_SECONDS = 1.0


def check_quota(name: str, value) -> float:
    """A quota value as a positive number (InvalidConfigError naming it otherwise)."""
    if name not in KINDS:
        raise InvalidConfigError(f"unknown quota {name!r}; known: {', '.join(KINDS)}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"quota {name}={value!r} is not a number") from None
    if number <= 0:
        raise InvalidConfigError(f"quota {name}={number} must be > 0")
    return number


class QuotaManager:
    """Quota settings of a :class:`~sparklog.security.store.SecurityStore` and the
    buckets of the clients using them (see the module docstring)."""

    def __init__(self, store):
        self.store = store
        #: (kind, entity type, name) -> [tokens, when, rate], least recently used first
        self._buckets: dict[tuple, list] = {}
        self._lock = threading.Lock()
        self._next_sweep = 0.0

    def settings(self, refresh: bool = False) -> dict:
        """``{entity type: {name: {quota: value}}}``: the store's copy re-read in the
        background when older than :data:`REFRESH_SECONDS` (at once with ``refresh``,
        off the event loop only)."""
        if refresh:
            self.store.forget("quotas")
        return self.store.cached("quotas", REFRESH_SECONDS)

    def alter(self, entity_type: str, name: str, set_: dict, remove: list) -> None:
        """Set and remove quotas of one entity."""
        if entity_type not in ENTITY_TYPES:
            raise InvalidConfigError(f"quota entity type {entity_type!r} must be one of "
                                     f"{', '.join(ENTITY_TYPES)}")
        checked = {k: check_quota(k, v) for k, v in set_.items()}

        def change(doc):
            entity = doc.setdefault(entity_type, {}).setdefault(name, {})
            entity.update(checked)
            for k in remove:
                entity.pop(k, None)
            if not entity:
                del doc[entity_type][name]
            return doc
        self.store.update("quotas", change)
        self.settings(refresh=True)

    def limit(self, kind: str, user: str, client_id: str) -> float | None:
        """The quota of ``kind`` applying to a user and client id, or None."""
        found = self._quota(kind, user, client_id)
        return None if found is None else found[1]

    def _quota(self, kind: str, user: str, client_id: str) -> tuple | None:
        """``((entity type, name), value)`` of the quota of ``kind`` applying (Kafka's
        precedence), or None: the entity is whose bucket the quota is counted in."""
        doc = self.settings()
        users, clients = doc.get("users", {}), doc.get("clients", {})
        for table, key, entity in ((users, user, ("users", user)),
                                   (users, DEFAULT, ("users", user)),
                                   (clients, client_id, ("clients", client_id)),
                                   (clients, DEFAULT, ("clients", client_id))):
            value = table.get(key, {}).get(kind)
            if value is not None:
                return entity, float(value)
        return None

    def record(self, kind: str, principal: str | None, client_id: str, amount: float
               ) -> float:
        """Take ``amount`` (bytes; seconds of handling for ``request_percentage``) from
        the bucket of the quota applying; return the seconds to throttle (0: none)."""
        user = (principal or "User:ANONYMOUS").partition(":")[2]
        found = self._quota(kind, user, client_id)
        if found is None:
            return 0.0
        entity, value = found
        rate = _RATE.get(kind, float)(value)
        now = time.monotonic()
        key = (kind, *entity)
        with self._lock:
            if now >= self._next_sweep:
                self._sweep(now)
            bucket = self._buckets.pop(key, None)  # put back last: most recently used
            if bucket is None:
                bucket = [rate * BURST_SECONDS, now, rate]
                while len(self._buckets) >= MAX_BUCKETS:
                    del self._buckets[next(iter(self._buckets))]
            self._buckets[key] = bucket
            bucket[0] = min(rate * BURST_SECONDS, bucket[0] + (now - bucket[1]) * rate)
            bucket[1], bucket[2] = now, rate
            bucket[0] -= amount
            return -bucket[0] / rate if bucket[0] < 0 else 0.0

    def _sweep(self, now: float) -> None:
        """Drop the buckets that have refilled by ``now`` (one like a new bucket) or were
        unused for :data:`EXPIRE_SECONDS` (under the lock)."""
        self._next_sweep = now + SWEEP_SECONDS
        gone = [key for key, (tokens, when, rate) in self._buckets.items()
                if tokens + (now - when) * rate >= rate * BURST_SECONDS
                or now - when >= EXPIRE_SECONDS]
        for key in gone:
            del self._buckets[key]

    @property
    def buckets(self) -> int:
        """Buckets kept now."""
        return len(self._buckets)


__all__ = ["BURST_SECONDS", "DEFAULT", "ENTITY_TYPES", "EXPIRE_SECONDS", "KINDS",
           "MAX_BUCKETS", "QuotaManager", "check_quota"]
