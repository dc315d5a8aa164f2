"""Retention: keeping partition logs bounded.

:mod:`sparklog.retention.policy` decides which sealed segments ``retention.ms`` and
``retention.bytes`` delete (``cleanup.policy=delete``); :mod:`sparklog.retention.manager`
is the broker's periodic task that applies it (``log.retention.check.interval.ms``).
Compaction (``cleanup.policy=compact``): :mod:`sparklog.log.cleaner` cleans one
partition log, :mod:`sparklog.retention.cleaner` is the broker's cleaner threads.
"""

from .policy import RetentionCutoff, apply_retention, retention_cutoff

__all__ = ["RetentionCutoff", "apply_retention", "retention_cutoff"]
