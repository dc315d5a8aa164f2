"""Finding a group's coordinator and sending it the group's requests (Kafka's
``AbstractCoordinator.lookupCoordinator``).

One broker coordinates a consumer group for the whole cluster. :class:`GroupCoordinator`
asks any broker FindCoordinator for the group, remembers the answer and sends the
group's requests (JoinGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
DescribeGroups, DeleteGroups) to that broker. When the coordinator answers
NOT_COORDINATOR, when none is available yet (its broker died and ZooKeeper has not
given its slot to another) or when its connection is lost, the coordinator is forgotten
and found again; :meth:`GroupCoordinator.request` does that until its timeout.
:func:`coordinator_request` is the one-off form (admin calls).
"""

from __future__ import annotations

import logging
import threading
import time

from ...errors import (
    BrokerNotAvailableError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
    RequestTimedOutError,
    UnsupportedVersionError,
)
from ...names import validate_group_id
from ...protocol.apis import COORDINATOR_KEY_GROUP, ApiKey, api_name
from ...protocol.codec import raise_for_error
from .network import NetworkClient

log = logging.getLogger(__name__)

#: errors after which the coordinator is looked up again (Kafka's
#: markCoordinatorUnknown): it moved, none is there yet, or its broker is unreachable
COORDINATOR_ERRORS = (NotCoordinatorError, CoordinatorNotAvailableError,
                      BrokerNotAvailableError, RequestTimedOutError)


class GroupCoordinator:
    """The coordinator of ``group_id`` as seen by one client (see the module
    docstring); thread-safe."""

    def __init__(self, client: NetworkClient, group_id: str):
        self.client = client
        self.group_id = validate_group_id(group_id)
        self._node: int | None = None
        self._lock = threading.Lock()

    def node(self) -> int:
        """The coordinator's broker id, asking FindCoordinator when not known (raises
        CoordinatorNotAvailableError while no broker coordinates the group); -1 (any
        broker) when the broker asked is older than FindCoordinator."""
        with self._lock:
            if self._node is not None:
                return self._node
        try:
            resp = self.client.request(ApiKey.FIND_COORDINATOR, {
                "key": self.group_id, "key_type": COORDINATOR_KEY_GROUP}, retries=0)
        except UnsupportedVersionError:
            # a broker older than FindCoordinator coordinates the groups of its own
            # clients: send to whichever broker is at hand, as before
            log.info("group %r: the broker does not know FindCoordinator; its group "
                     "requests go to any broker", self.group_id)
            with self._lock:
                self._node = -1
            return -1
        node = resp["node_id"]
        with self._lock:
            if self._node != node:
                log.info("group %r: coordinator is broker %d (%s:%d)", self.group_id, node,
                         resp["host"], resp["port"])
            self._node = node
        return node

    def reset(self, why: object = "") -> None:
        """Forget the coordinator: the next request finds it again."""
        with self._lock:
            if self._node is not None:
                log.info("group %r: coordinator %d unusable (%s); finding it again",
                         self.group_id, self._node, why)
            self._node = None

    def send(self, api_key: int, body: dict):
        """Send to the coordinator; return the request's future (its response's errors
        are the caller's; on a coordinator error call :meth:`reset`)."""
        return self.client.send(self.node(), api_key, body)

    def call(self, api_key: int, body: dict, timeout: float | None = None) -> dict:
        """One attempt: send to the coordinator and wait; request-level errors are
        raised, and a coordinator error also forgets the coordinator (the next call
        finds it again)."""
        try:
            resp = self.send(api_key, body).get(
                timeout if timeout is not None else self.client.request_timeout_ms / 1000.0)
            raise_for_error(resp, api_name(api_key))
            return resp
        except COORDINATOR_ERRORS as exc:
            self.reset(exc)
            raise

    def request(self, api_key: int, body: dict, *, timeout: float | None = None,
                deadline: float | None = None) -> dict:
        """Send to the coordinator and wait for the response (request-level errors are
        raised); a coordinator error or a lost connection finds the coordinator again
        and resends, until ``deadline`` (``time.monotonic()``; default: the client's
        request timeout from now). ``timeout``: of each attempt."""
        if deadline is None:
            deadline = time.monotonic() + self.client.request_timeout_ms / 1000.0
        per_attempt = timeout if timeout is not None else \
            self.client.request_timeout_ms / 1000.0 + 1
        while True:
            try:
                return self.call(api_key, body, per_attempt)
            except COORDINATOR_ERRORS:
                if time.monotonic() + self.client.retry_backoff >= deadline:
                    raise
                time.sleep(self.client.retry_backoff)


def coordinator_request(client: NetworkClient, group_id: str, api_key: int,
                        body: dict) -> dict:
    """Send one group request to the group's coordinator (found first), retrying while
    it moves (:meth:`GroupCoordinator.request`)."""
    return GroupCoordinator(client, group_id).request(api_key, body)


__all__ = ["COORDINATOR_ERRORS", "GroupCoordinator", "coordinator_request"]
