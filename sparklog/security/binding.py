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
"""

from __future__ import annotations

import hashlib
import hmac

from .store import PRODUCER_TOKEN_KEY, SecurityStore

TOKEN_SIZE = 16


class ProducerIdBinding:
    """Issues and checks producer tokens (module docstring); the key is read (or made)
    from ``store`` at construction."""

    def __init__(self, store: SecurityStore):
        self._key = store.cluster_key(PRODUCER_TOKEN_KEY)

    def token(self, producer_id: int, principal: str) -> bytes:
        """The token binding ``producer_id`` to ``principal``."""
        msg = f"{int(producer_id)}\n{principal}".encode()
        return hmac.new(self._key, msg, hashlib.sha256).digest()[:TOKEN_SIZE]

    def bound(self, producer_id: int, principal: str, token) -> bool:
        """True when ``token`` binds ``producer_id`` to ``principal``."""
        if not isinstance(token, (bytes, bytearray)) or len(token) != TOKEN_SIZE:
            return False
        return hmac.compare_digest(self.token(producer_id, principal), bytes(token))


__all__ = ["ProducerIdBinding", "TOKEN_SIZE"]
