"""sparklog: a PySpark-native partitioned log on HDFS.

The client API is importable from the package root (loaded on first use)::

    import sparklog
    with sparklog.connect("file:///tmp/log") as s:
        s.admin().create_topic("events", partitions=3)
        s.producer().send("events", b"hello").get()
"""
from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:  # what IDEs and type checkers see; at run time loaded on first use
    # "X as X": re-exported names (PEP 484), not unused imports
    from sparklog.clients.admin import Admin as Admin
    from sparklog.clients.admin import NewTopic as NewTopic
    from sparklog.clients.consumer import Consumer as Consumer
    from sparklog.clients.producer import Producer as Producer
    from sparklog.clients.types import OffsetAndMetadata as OffsetAndMetadata
    from sparklog.clients.types import TopicPartition as TopicPartition
    from sparklog.session import Session as Session
    from sparklog.session import connect as connect

_EXPORTS = {
    "connect": ("sparklog.session", "connect"),
    "Session": ("sparklog.session", "Session"),
    "Producer": ("sparklog.clients.producer", "Producer"),
    "Consumer": ("sparklog.clients.consumer", "Consumer"),
    "Admin": ("sparklog.clients.admin", "Admin"),
    "NewTopic": ("sparklog.clients.admin", "NewTopic"),
    "TopicPartition": ("sparklog.clients.types", "TopicPartition"),
    "OffsetAndMetadata": ("sparklog.clients.types", "OffsetAndMetadata"),
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


def __dir__():
    """The module's names, the lazily loaded exports included (tab completion)."""
    return sorted(set(globals()) | set(_EXPORTS))
