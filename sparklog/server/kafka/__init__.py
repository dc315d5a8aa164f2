"""The broker's Kafka listener: Apache Kafka's wire protocol on the listeners named in
``kafka.listener.names`` (docs/kafka-protocol.md). :mod:`.apis` translates Kafka's
requests to the broker's handlers and back; :mod:`.records` converts record batches."""
