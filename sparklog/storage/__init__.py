"""Storage layer: one file-system contract (HDFS's) over local disk, HDFS and WebHDFS.

Use :func:`open_fileio` to get a :class:`FileIO` for a URL or path:

* no scheme or ``file://``  -> :class:`~sparklog.storage.local.LocalFileIO`
* ``hdfs://nn:8020/...``    -> :class:`~sparklog.storage.hdfs.HadoopFileIO` (Hadoop's Java client)
* ``webhdfs://nn:9870/...`` -> :class:`~sparklog.storage.webhdfs.WebHdfsFileIO` (REST)

There is deliberately no generic fsspec fallback: other file systems do not give
atomic create-no-overwrite, rename-no-replace and single-writer leases.
"""

from __future__ import annotations

from sparklog.errors import InvalidArgumentError
from sparklog.storage.base import FileInfo, FileIO, OutputStream
from sparklog.storage.paths import check_path, url_scheme

__all__ = ["FileIO", "OutputStream", "FileInfo", "open_fileio", "SCHEMES"]

#: URL schemes open_fileio() understands ('' is a plain local path).
SCHEMES = ("", "file", "hdfs", "webhdfs")


def open_fileio(url_or_path, **options) -> FileIO:
    """Return a FileIO for ``url_or_path``, chosen by its scheme.

    ``options`` go to the backend's constructor (e.g. ``buffer_size`` for local,
    ``user`` / ``kerb_ticket`` / ``principal`` + ``keytab`` for hdfs, ``user`` / ``kerberos`` for webhdfs).
    Raises InvalidArgumentError for an unsupported scheme and StorageError when the
    backend's client library cannot be loaded (the message names what is missing).
    """
    url = check_path(url_or_path, "url_or_path")
    scheme = url_scheme(url)
    if scheme in ("", "file"):
        from sparklog.storage.local import LocalFileIO

        return LocalFileIO(url, **options)
    if scheme == "hdfs":
        from sparklog.storage.hdfs import HadoopFileIO

        return HadoopFileIO(url, **options)
    if scheme in ("webhdfs", "swebhdfs"):
        from sparklog.storage.webhdfs import WebHdfsFileIO

        return WebHdfsFileIO(url, **options)
    raise InvalidArgumentError(
        f"unsupported storage URL scheme {scheme!r} in {url!r}: use a plain path, "
        "file://, hdfs:// or webhdfs:// (no generic fsspec fallback: other file systems "
        "cannot honour the storage contract)")
