"""sparklog: a PySpark-native partitioned log on HDFS.

The client API is importable from the package root (loaded on first use)::

    import sparklog
    with sparklog.connect("file:///tmp/log") as s:
        s.admin().create_topic("events", partitions=3)
        s.producer().send("events", b"hello").get()
"""
__version__ = "0.1.0"

_EXPORTS = {
    "connect": ("sparklog.connect", "connect"),
    "Session": ("sparklog.connect", "Session"),
    "Producer": ("sparklog.writer.producer", "Producer"),
    "Consumer": ("sparklog.reader.consumer", "Consumer"),
    "Admin": ("sparklog.admin", "Admin"),
    "NewTopic": ("sparklog.admin", "NewTopic"),
    "TopicPartition": ("sparklog.client.types", "TopicPartition"),
    "OffsetAndMetadata": ("sparklog.client.types", "OffsetAndMetadata"),
}
__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        module, attr = _EXPORTS[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sparklog' has no attribute {name!r}")
