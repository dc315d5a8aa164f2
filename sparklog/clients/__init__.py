"""sparklog's clients, as Kafka's: :mod:`.producer`, :mod:`.consumer` and :mod:`.admin`,
over the connection layer they share (:mod:`.network`: connections, bootstrap and
metadata, offset requests, futures) and the value types (:mod:`.types`). The package
root re-exports the public classes (``sparklog.Producer``...)."""
