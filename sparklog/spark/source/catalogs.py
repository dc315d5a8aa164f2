"""The catalog a source's options select (:func:`open_catalog`).

Kept apart from :mod:`.catalog` (the interface and the storage catalog) and
:mod:`.broker_catalog`, which both build on that interface, so neither imports the other.
"""

from __future__ import annotations

from contextlib import contextmanager

from ...errors import StorageError, StorageFileNotFoundError
from .catalog import Catalog, StorageCatalog


def open_catalog(opts, *, shared: bool = False) -> Catalog:
    """The catalog for parsed source options: broker when ``bootstrap.servers`` is set,
    else the storage root ``path`` (``shared``: on the process's kept FileIO of that
    root, see :class:`StorageCatalog`). The broker catalog (the network clients) is
    imported only then: a ``path``-mode plan, which runs in a Python worker started for
    it, does not pay for it."""
    if opts.bootstrap_servers:
        from .broker_catalog import BrokerCatalog

        return BrokerCatalog(opts.bootstrap_servers, opts.path, security=opts.security,
                             storage_options=opts.storage_options)
    return StorageCatalog(opts.path, opts.storage_options, shared=shared)


@contextmanager
def planning_catalog(opts):
    """The catalog of one planning call (the schema at ``load()``, a batch plan), closed
    after it. In ``path`` mode it reads through the storage root's FileIO that the
    process keeps between calls (Spark reuses its planning workers: the second and later
    queries of a session open no storage client); every call reads topics, configs and
    log ends afresh. A storage error other than a missing file drops the kept FileIO:
    the next call opens a new one."""
    catalog = open_catalog(opts, shared=True)
    try:
        yield catalog
    except StorageError as exc:
        if not isinstance(exc, StorageFileNotFoundError):
            catalog.discard_fileio()
        raise
    finally:
        catalog.close()
