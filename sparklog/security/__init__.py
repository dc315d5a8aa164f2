"""Security of the broker and its clients, under Kafka's names.

* :mod:`.listeners`: ``listeners``, ``advertised.listeners`` and
  ``listener.security.protocol.map`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL);
* :mod:`.config`: the broker's security properties (``ssl.*``, ``sasl.*``,
  ``super.users``, ``authorizer.class.name`` ...), with per-listener overrides;
* :mod:`.tls`: TLS contexts for listeners and clients, principals of certificates;
* :mod:`.scram`: SCRAM-SHA-256/512 credentials (salted and hashed) and both sides of
  the exchange; :mod:`.sasl`: the broker's side of SaslHandshake/SaslAuthenticate
  (PLAIN, SCRAM and GSSAPI: :mod:`.gssapi`, its principals mapped to users by
  :mod:`.principals`, Kafka's ``sasl.kerberos.principal.to.local.rules``);
* :mod:`.session`: what one connection has proven (its principal);
* :mod:`.store`: SCRAM credentials and ACLs in the coordination store (ZooKeeper in
  cluster mode, the storage root in standalone mode);
* :mod:`.acl`: ACL bindings and the authorizer; :mod:`.enforce`: which operation on
  which resource every API needs; :mod:`.audit`: the audit log;
* :mod:`.client`: the clients' side (``security_protocol``, ``ssl_cafile``,
  ``sasl_mechanism`` ... as kafka-python names them).

docs/security.md is the operator's guide.
"""
