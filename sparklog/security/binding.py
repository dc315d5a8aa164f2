"""Producer ids bound to whoever obtained them: :class:`ProducerIdBinding`.

A frame's producer id, epoch and sequence are visible to every reader of the topic, so
they prove nothing. InitProducerId therefore answers, beside the producer id, a
*producer token*: ``HMAC-SHA256(key, producer id, principal)`` (16 bytes), and every
Produce request carries, per partition, the token of the producer id its frames name.
A frame whose producer id the token does not bind to the sending connection's principal
is refused (INVALID_PRODUCER_ID_MAPPING) before it reaches the partition.

* **Authenticated listeners**: the id is bound to the principal (``User:alice``): another
  principal holding the token still cannot use it.
* **Unauthenticated listeners** (``User:ANONYMOUS``): the id is bound to the client that
  received the token. Neither the client's address (shared by every process of a host,
  and by clients behind one NAT) nor its client id (the client's own claim) tells two
  anonymous clients apart, and a connection ends at a reconnect and reaches one broker
  only; the token travels with the producer across reconnects and to every broker, and
  is never written to a frame, so a reader of the log cannot learn it. On PLAINTEXT a
  client that can read the network traffic reads it as it reads everything else: use
  TLS there.

The key is one per cluster, in the coordination store's shared document
``security/producer-ids`` (:meth:`~sparklog.security.store.SecurityStore.cluster_key`:
made once by whichever broker needs it first), so any broker verifies a token another
broker issued, after leadership moves and restarts, without any per-producer state.
Losing the document makes every token invalid: producers then need a new producer id.

**Kafka clients** (a Kafka listener, :mod:`sparklog.server.kafka`) carry no token: they
send only the producer id and epoch InitProducerId gave them. Which principal obtained
which id is therefore recorded (:meth:`ProducerIdBinding.claim`) in the coordination
store's document ``security/kafka-producer-ids`` (``{principal: [ids]}``, the newest
:data:`MAX_KAFKA_IDS_PER_PRINCIPAL` per principal), before InitProducerId is answered,
so that every broker of the cluster can tell (:meth:`ProducerIdBinding.obtained`) that
a Produce request's producer id was obtained by the connection's principal; the token
is then computed for it. A principal evicts only its own oldest ids.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import threading

from .store import PRODUCER_TOKEN_KEY, SecurityStore

TOKEN_SIZE = 16
#: the coordination store's document of the producer ids Kafka clients obtained
KAFKA_PRODUCER_IDS = "kafka-producer-ids"
#: producer ids kept per principal in it (the oldest are forgotten: their producers
#: are refused INVALID_PRODUCER_ID_MAPPING and need a new id)
MAX_KAFKA_IDS_PER_PRINCIPAL = 1024
#: (principal, producer id) pairs remembered by this broker without reading the store
_LOCAL_CLAIMS = 100_000


class ProducerIdBinding:
    """Issues and checks producer tokens (module docstring); the key is read (or made)
    from ``store`` at construction."""

    def __init__(self, store: SecurityStore):
        self._key = store.cluster_key(PRODUCER_TOKEN_KEY)
        self._store = store
        #: (principal, producer id) known to be claimed, the most recently used last
        self._claims: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()

    def token(self, producer_id: int, principal: str) -> bytes:
        """The token binding ``producer_id`` to ``principal``."""
        msg = f"{int(producer_id)}\n{principal}".encode()
        return hmac.new(self._key, msg, hashlib.sha256).digest()[:TOKEN_SIZE]

    def bound(self, producer_id: int, principal: str, token) -> bool:
        """True when ``token`` binds ``producer_id`` to ``principal``."""
        if not isinstance(token, (bytes, bytearray)) or len(token) != TOKEN_SIZE:
            return False
        return hmac.compare_digest(self.token(producer_id, principal), bytes(token))

    def _remember(self, producer_id: int, principal: str) -> None:
        with self._lock:
            self._claims[(principal, int(producer_id))] = True
            self._claims.move_to_end((principal, int(producer_id)))
            while len(self._claims) > _LOCAL_CLAIMS:
                self._claims.popitem(last=False)

    def claim(self, producer_id: int, principal: str) -> None:
        """Record in the coordination store that ``principal`` obtained ``producer_id``
        through a Kafka listener (module docstring). Blocking: call it on an I/O
        thread."""
        pid = int(producer_id)

        def add(doc):
            ids = [i for i in doc.get(principal, []) if i != pid]
            doc[principal] = (ids + [pid])[-MAX_KAFKA_IDS_PER_PRINCIPAL:]
            return doc
        self._store.update(KAFKA_PRODUCER_IDS, add)
        self._remember(pid, principal)

    def obtained(self, producer_id: int, principal: str) -> bool:
        """True when ``principal`` obtained ``producer_id`` through a Kafka listener of
        any broker (:meth:`claim`): from this broker's memory, else from the store.
        Blocking on a miss: call it on an I/O thread."""
        key = (principal, int(producer_id))
        with self._lock:
            if key in self._claims:
                self._claims.move_to_end(key)
                return True
        if int(producer_id) not in self._store.read(KAFKA_PRODUCER_IDS).get(principal, []):
            return False
        self._remember(int(producer_id), principal)
        return True

    def known(self, producer_id: int, principal: str) -> bool:
        """:meth:`obtained` from this broker's memory only (never blocks)."""
        with self._lock:
            return (principal, int(producer_id)) in self._claims


__all__ = ["KAFKA_PRODUCER_IDS", "MAX_KAFKA_IDS_PER_PRINCIPAL", "ProducerIdBinding", "TOKEN_SIZE"]
