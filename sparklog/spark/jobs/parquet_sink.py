"""Parquet sink: Spark-written files plus one atomic manifest per commit.

Layout of the output directory::

    _sparklog/staging/<app>/<version>-<attempt>/...   files of one attempt (Spark writes)
    _sparklog/manifests/<app>/<version:020d>.json      one manifest per commit
    <partition dirs>/part-....parquet                 published files of committed runs

The commit point is the creation of manifest ``<version>`` of the application with the
storage's create-if-absent primitive (:meth:`FileIO.write_atomic`: temporary file plus
rename-no-replace, DESIGN.md section 3): of concurrent runs exactly one creates it. The
manifest lists the files and carries the :class:`CommitRecord` (offsets).

After the commit the files are *published*: renamed from the staging directory to the
output directory (same relative path; Spark's file names are unique), so a plain
``spark.read.parquet(output)`` or Hive table sees them. Names starting with ``_`` are
hidden from Spark, Hive and pyarrow, so files of attempts that never committed are
never visible to any reader. A crash while publishing leaves the manifest committed and
some files still staged: :func:`committed_files` (the exact, atomic view) resolves each
file where it is, and the next run of the application finishes the publication in
:meth:`ParquetSink.cleanup`. Plain directory readers may see part of a commit only
during that window (as with Kafka Connect's HDFS sink, which commits file by file).
"""

from __future__ import annotations

import json

from ...errors import (
    ConcurrentTransactionsError,
    FileAlreadyExistsError,
    InvalidArgumentError,
    StorageError,
    StorageFileNotFoundError,
)
from ...metadata.topic import schema_from_text, schema_to_text
from ...names import validate_app_id
from .records import CommitRecord, DataFile, StagedFiles
from .sink import Sink, attempt_dir_name, normalize_uri, parse_attempt_dir_name

SPARKLOG_DIR = "_sparklog"
MANIFESTS_DIR = "manifests"
STAGING_DIR = "staging"
#: Version of the manifest document.
MANIFEST_FORMAT = 1
_WIDTH = 20


class ParquetSink(Sink):
    """Exactly-once output into the Parquet directory ``uri`` (see module docstring)."""

    format = "parquet"

    # --- paths --------------------------------------------------------------------------
    def manifest_dir(self, app_id: str) -> str:
        """Directory of ``app_id``'s manifests."""
        return self.fileio.join(self.uri, SPARKLOG_DIR, MANIFESTS_DIR, validate_app_id(app_id))

    def manifest_path(self, app_id: str, version: int) -> str:
        """Manifest of ``version`` of ``app_id``."""
        return self.fileio.join(self.manifest_dir(app_id), f"{version:0{_WIDTH}d}.json")

    def staging_location(self, app_id: str, version: int, attempt: str) -> str:
        """``<output>/_sparklog/staging/<app>/<version>-<attempt>``."""
        return self.fileio.join(self.uri, self._staging_rel(app_id, version, attempt))

    @staticmethod
    def _staging_rel(app_id: str, version: int, attempt: str) -> str:
        return "/".join([SPARKLOG_DIR, STAGING_DIR, validate_app_id(app_id),
                         attempt_dir_name(version, attempt)])

    # --- manifests -------------------------------------------------------------------------
    def versions(self, app_id: str) -> list[int]:
        """Committed versions of ``app_id``, ascending."""
        out = []
        for info in self.fileio.list(self.manifest_dir(app_id)):
            stem, dot, ext = info.name.partition(".")
            if dot and ext == "json" and stem.isdigit():
                out.append(int(stem))
        return sorted(out)

    def read_manifest(self, app_id: str, version: int) -> dict:
        """The manifest document of ``version`` (StorageFileNotFoundError if absent,
        StorageError if it is not a sparklog manifest)."""
        path = self.manifest_path(app_id, version)
        raw = self.fileio.read_all(path)
        try:
            doc = json.loads(raw)
            CommitRecord.from_doc(doc["commit"])
            [DataFile.from_dict(f) for f in doc["files"]]
            doc["staging"]
        except (ValueError, KeyError, TypeError, InvalidArgumentError) as exc:
            raise StorageError(f"{path}: not a valid sparklog manifest ({exc})") from None
        return doc

    def last_commit(self, app_id: str) -> CommitRecord | None:
        """The record of the newest manifest of ``app_id`` (None if it has none)."""
        versions = self.versions(app_id)
        if not versions:
            return None
        return CommitRecord.from_doc(self.read_manifest(app_id, versions[-1])["commit"])

    def commits(self, app_id: str) -> list[CommitRecord]:
        """Every commit of ``app_id``, oldest first."""
        return [CommitRecord.from_doc(self.read_manifest(app_id, v)["commit"])
                for v in self.versions(app_id)]

    def applications(self) -> list[str]:
        """Applications with at least one manifest in this output."""
        base = self.fileio.join(self.uri, SPARKLOG_DIR, MANIFESTS_DIR)
        return sorted(i.name for i in self.fileio.list(base)
                      if i.is_dir and not i.name.startswith((".", "_")))

    # --- commit ----------------------------------------------------------------------------
    def _conflict(self, record: CommitRecord) -> CommitRecord:
        """Stored record if this attempt already committed ``record.version``; else
        raise ConcurrentTransactionsError."""
        try:
            doc = self.read_manifest(record.app_id, record.version)
        except StorageFileNotFoundError:
            doc = None
        if doc is not None and doc["commit"]["attempt"] == record.attempt:
            self._publish(doc)
            return CommitRecord.from_doc(doc["commit"])
        latest = self.versions(record.app_id)
        raise ConcurrentTransactionsError(
            f"Parquet output {self.uri}: application {record.app_id!r} already committed "
            f"version {latest[-1] if latest else record.version}"
            + (f" (attempt {doc['commit']['attempt']})" if doc is not None else "")
            + f"; attempt {record.attempt} of version {record.version} made nothing visible")

    def commit(self, staged: StagedFiles, record: CommitRecord) -> CommitRecord:
        """Create manifest ``record.version`` (the atomic commit), then publish."""
        versions = self.versions(record.app_id)
        if versions and versions[-1] >= record.version:
            return self._conflict(record)
        doc = {"format": MANIFEST_FORMAT, "commit": record.to_doc(),
               "staging": self._staging_rel(staged.app_id, staged.version, staged.attempt),
               "partitionBy": list(staged.partition_by),
               "schema": schema_to_text(staged.schema),
               "files": [f.to_dict() for f in staged.files]}
        data = json.dumps(doc, sort_keys=True, indent=1).encode()
        self.fileio.mkdirs(self.manifest_dir(record.app_id))
        try:
            self.fileio.write_atomic(self.manifest_path(record.app_id, record.version), data)
        except FileAlreadyExistsError:
            return self._conflict(record)
        self._publish(doc)
        return record

    def _publish(self, doc: dict) -> None:
        """Move a committed manifest's files from staging into the output (idempotent:
        files already moved are skipped), then drop the staging directory."""
        staging = self.fileio.join(self.uri, doc["staging"])
        for f in doc["files"]:
            src = self.fileio.join(staging, f["path"])
            dst = self.fileio.join(self.uri, f["path"])
            if self.fileio.exists(dst):
                continue
            self.fileio.mkdirs(self.fileio.split(dst)[0])
            try:
                self.fileio.rename(src, dst)
            except (StorageFileNotFoundError, FileAlreadyExistsError):
                if not self.fileio.exists(dst):  # neither here nor there: data lost
                    raise StorageError(
                        f"committed file {f['path']} of {self.uri} is neither staged at "
                        f"{src} nor published at {dst}") from None
        self._delete_quietly(staging)

    def cleanup(self, app_id: str, full: bool = False) -> int:
        """Finish publishing committed attempts, delete the staging directories of
        attempts whose version another attempt committed. Attempts at a version not
        committed yet may be in progress and are left alone. (Only leftovers are in the
        staging directory, so every run examines all of them; ``full`` changes nothing.)"""
        base = self.fileio.join(self.uri, SPARKLOG_DIR, STAGING_DIR, validate_app_id(app_id))
        entries = [(parse_attempt_dir_name(i.name), i.path) for i in self.fileio.list(base)]
        entries = [(p, path) for p, path in entries if p is not None]
        if not entries:
            return 0
        versions = set(self.versions(app_id))
        latest = max(versions, default=-1)
        removed = 0
        for (version, attempt), path in entries:
            if version > latest:
                continue
            doc = None
            if version in versions:
                try:
                    doc = self.read_manifest(app_id, version)
                except StorageFileNotFoundError:
                    continue
            if doc is not None and doc["commit"]["attempt"] == attempt:
                self._publish(doc)
            else:
                removed += self._delete_quietly(path)
        return removed


def committed_files(uri, app_id: str | None = None) -> list[str]:
    """URLs of the Parquet files committed to the output ``uri`` (by ``app_id``, or by
    every application), in commit order: the exact, atomic view of the output.

    Each file is resolved where it is (published, or still staged after a crash during
    publication). Read them with ``pyarrow.parquet.read_table(files)`` or
    ``spark.read.parquet(*files)`` (``basePath`` set to ``uri`` keeps Hive partition
    columns). StorageError if a committed file is missing.
    """
    sink = ParquetSink(normalize_uri(uri))
    apps = [validate_app_id(app_id)] if app_id is not None else sink.applications()
    out = []
    for app in apps:
        for version in sink.versions(app):
            doc = sink.read_manifest(app, version)
            staging = sink.fileio.join(sink.uri, doc["staging"])
            for f in doc["files"]:
                out.append(_resolve(sink.fileio, sink.fileio.join(sink.uri, f["path"]),
                                    sink.fileio.join(staging, f["path"])))
    return out


def read_committed(uri, app_id: str | None = None):
    """The rows committed to the Parquet output ``uri`` (by ``app_id`` or all
    applications) as one ``pyarrow.Table`` with the output's schema, Hive partition
    columns included (restored from the manifests, typed)."""
    import pyarrow as pa
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    sink = ParquetSink(normalize_uri(uri))
    apps = [validate_app_id(app_id)] if app_id is not None else sink.applications()
    tables, schema = [], None
    for app in apps:
        for version in sink.versions(app):
            doc = sink.read_manifest(app, version)
            file_schema = schema_from_text(doc["schema"])
            schema = schema or file_schema
            staging = sink.fileio.join(sink.uri, doc["staging"])
            for f in doc["files"]:
                url = _resolve(sink.fileio, sink.fileio.join(sink.uri, f["path"]),
                               sink.fileio.join(staging, f["path"]))
                fs, path = pafs.FileSystem.from_uri(url)
                table = pq.read_table(path, filesystem=fs)
                for name, value in f["partitionValues"].items():
                    typ = file_schema.field(name).type
                    col = pa.array([value] * table.num_rows, pa.string()).cast(typ)
                    table = table.append_column(name, col)
                tables.append(table.select(file_schema.names).cast(file_schema))
    if schema is None:
        return pa.table({})
    return pa.concat_tables(tables) if tables else schema.empty_table()


def _resolve(fileio, published: str, staged: str) -> str:
    for _ in range(2):  # a concurrent publish may move the file between the two checks
        if fileio.exists(published):
            return published
        if fileio.exists(staged):
            return staged
    raise StorageError(f"committed file missing: neither {published} nor {staged} exists")
