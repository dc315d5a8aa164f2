"""The catalog a source's options select (:func:`open_catalog`).

Kept apart from :mod:`.catalog` (the interface and the storage catalog) and
:mod:`.broker_catalog`, which both build on that interface, so neither imports the other.
"""

from __future__ import annotations

from .catalog import Catalog, StorageCatalog


def open_catalog(opts) -> Catalog:
    """The catalog for parsed source options: broker when ``bootstrap.servers`` is set,
    else the storage root ``path``. The broker catalog (the network clients) is imported
    only then: a ``path``-mode plan, which runs in a Python worker started for it, does
    not pay for it."""
    if opts.bootstrap_servers:
        from .broker_catalog import BrokerCatalog

        return BrokerCatalog(opts.bootstrap_servers, opts.path, security=opts.security,
                             storage_options=opts.storage_options)
    return StorageCatalog(opts.path, opts.storage_options)
