"""Delta sink: Spark writes the Parquet files, delta-rs commits them in one transaction.

Layout of the table directory (a standard Delta table, readable by delta-spark, delta-rs,
Trino...)::

    _delta_log/                                   the Delta log (delta-rs writes it)
    sparklog-runs/<app>/<version>-<attempt>/...   Parquet files of one run (Hive
                                                  partition directories inside)

A run's files become part of the table only through the Delta commit that adds them;
files of a failed attempt are in no commit, so no Delta reader ever sees them, and
:meth:`DeltaSink.cleanup` deletes them once their version is committed by another
attempt. The directory is not hidden (no leading ``_``) so that VACUUM manages the
files later removed from the table.

Each commit carries, in its ``commitInfo``, the :class:`CommitRecord` under the key
``sparklog`` (offsets, ranges, counts) and a Delta application transaction
``txn(appId=<app>, version=<n>)``. Before committing, the driver checks on the snapshot
it commits against that the application's transaction version is below ``n``; a
concurrent commit carrying the same application id makes delta-rs's conflict checker
fail this one ("Concurrent transaction failed"), so of two runs exactly one commits.
"""

from __future__ import annotations

import json

from ...errors import (
    ConcurrentTransactionsError,
    InvalidArgumentError,
    SchemaMismatchError,
    StorageError,
)
from ...names import validate_app_id
from .records import CommitRecord, StagedFiles
from .sink import Sink, attempt_dir_name, parse_attempt_dir_name

#: Directory (under the table) of the runs' data files.
RUNS_DIR = "sparklog-runs"
#: Key of the commit record in a Delta commitInfo.
COMMIT_INFO_KEY = "sparklog"
#: Commits scanned first when looking for an application's commit in the history.
HISTORY_PAGE = 100
#: Committed versions whose run directories cleanup() examines (see there).
CLEANUP_WINDOW = 16


def _schema_shape(delta_schema) -> list:
    """Field names and types of a Delta schema, ignoring nullability and metadata."""

    def strip(node):
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items()
                    if k not in ("nullable", "metadata", "containsNull",
                                 "valueContainsNull")}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    return strip(json.loads(delta_schema.to_json())["fields"])


class DeltaSink(Sink):
    """Exactly-once output into the Delta table at ``uri``.

    ``partition_by``: partition columns for a new table (an existing table's are used
    when omitted; a different list raises InvalidArgumentError). ``storage_options``
    go to delta-rs (credentials, HDFS settings); ``configuration`` sets table properties
    (``delta.*``) when the table is created.
    """

    format = "delta"

    def __init__(self, uri, partition_by=None, *, storage_options=None,
                 configuration=None):
        super().__init__(uri, partition_by)
        self._explicit_partitioning = partition_by is not None
        self.storage_options = dict(storage_options or {}) or None
        self.configuration = dict(configuration or {}) or None

    # --- table access ----------------------------------------------------------------
    def table(self):
        """The current DeltaTable, or None if there is no table at ``uri`` yet."""
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(self.uri, self.storage_options):
            return None
        return DeltaTable(self.uri, storage_options=self.storage_options)

    def _create_table(self, staged: StagedFiles):
        """Create the (empty) table; a concurrent creator winning is fine."""
        from deltalake import DeltaTable

        try:
            DeltaTable.create(self.uri, staged.schema, mode="ignore",
                              partition_by=staged.partition_by or None,
                              configuration=self.configuration,
                              storage_options=self.storage_options)
        except Exception:
            if self.table() is None:
                raise
        return self.table()

    # --- history -----------------------------------------------------------------------
    def _commits(self, dt, app_id: str | None = None, down_to: int = 0):
        """Commit records in ``dt``'s history, newest first (of ``app_id`` only if
        given), until one with version <= ``down_to`` was yielded."""
        seen = 0
        for limit in (HISTORY_PAGE, None):
            entries = dt.history(limit)
            for info in entries[seen:]:
                doc = info.get(COMMIT_INFO_KEY)
                if not isinstance(doc, dict):
                    continue
                record = CommitRecord.from_doc(doc)
                if app_id is not None and record.app_id != app_id:
                    continue
                yield record
                if app_id is not None and record.version <= down_to:
                    return
            if limit is None or len(entries) < limit:
                return
            seen = len(entries)

    def _find_commit(self, dt, app_id: str, version: int) -> CommitRecord | None:
        for record in self._commits(dt, app_id, version):
            if record.version == version:
                return record
        return None

    # --- the sink contract ---------------------------------------------------------------
    def last_commit(self, app_id: str) -> CommitRecord | None:
        """The commit of ``app_id``'s current Delta transaction version (None if the
        table or the application transaction does not exist). StorageError if the
        commitInfo of that version was removed from the log (log retention)."""
        validate_app_id(app_id)
        dt = self.table()
        if dt is None:
            return None
        version = dt.transaction_version(app_id)
        if version is None:
            return None
        record = self._find_commit(dt, app_id, version)
        if record is None:
            raise StorageError(
                f"Delta table {self.uri}: application {app_id!r} is at transaction version "
                f"{version} but its commitInfo with the offsets is no longer in the log "
                "(expired by delta.logRetentionDuration?); restart the application with "
                "explicit starting offsets")
        return record

    def table_version(self) -> int | None:
        """The Delta table's version (None before the table exists)."""
        dt = self.table()
        return None if dt is None else dt.version()

    def committed_version(self, app_id: str) -> int | None:
        """The application's Delta transaction version (from the snapshot itself)."""
        dt = self.table()
        return None if dt is None else dt.transaction_version(validate_app_id(app_id))

    def staging_location(self, app_id: str, version: int, attempt: str) -> str:
        """``<table>/sparklog-runs/<app>/<version>-<attempt>``."""
        return self.fileio.join(self.uri, RUNS_DIR, validate_app_id(app_id),
                                attempt_dir_name(version, attempt))

    def validate(self, df) -> None:
        """Before staging: adopt or check the table's partition columns and check the
        result's schema against the table's (SchemaMismatchError names the columns)."""
        from .sink import spark_arrow_schema

        dt = self.table()
        if dt is None:
            return
        existing = list(dt.metadata().partition_columns)
        if not self._explicit_partitioning:
            self.partition_by = existing
        elif existing != self.partition_by:
            raise InvalidArgumentError(
                f"Delta table {self.uri} is partitioned by {existing}, not by "
                f"{self.partition_by}")
        self._check_schema(dt, spark_arrow_schema(df))

    def _check_schema(self, dt, arrow_schema) -> None:
        from deltalake import Schema as DeltaSchema

        have = _schema_shape(dt.schema())
        want = _schema_shape(DeltaSchema.from_arrow(arrow_schema))
        if have != want:
            raise SchemaMismatchError(
                f"the job's result does not match the schema of Delta table {self.uri}: "
                f"table columns {[f['name'] + ':' + json.dumps(f['type']) for f in have]}, "
                f"result columns {[f['name'] + ':' + json.dumps(f['type']) for f in want]}")

    def _check_version(self, dt, record: CommitRecord) -> CommitRecord | None:
        """None if ``record.version`` is still free on snapshot ``dt``; the stored
        record if this attempt already committed it; else ConcurrentTransactionsError."""
        current = dt.transaction_version(record.app_id)
        if current is None or current < record.version:
            return None
        stored = self._find_commit(dt, record.app_id, record.version)
        if stored is not None and stored.attempt == record.attempt:
            return stored
        raise ConcurrentTransactionsError(
            f"Delta table {self.uri}: application {record.app_id!r} already committed "
            f"transaction version {current}"
            + (f" (attempt {stored.attempt})" if stored is not None else "")
            + f"; attempt {record.attempt} of version {record.version} made nothing visible")

    def commit(self, staged: StagedFiles, record: CommitRecord) -> CommitRecord:
        """Commit ``staged``'s files and ``record`` in one Delta transaction carrying
        the application transaction (app id, version); see the module docstring."""
        from deltalake.exceptions import CommitFailedError
        from deltalake.transaction import AddAction, CommitProperties, Transaction

        dt = self.table() or self._create_table(staged)
        done = self._check_version(dt, record)
        if done is not None:
            return done
        if list(dt.metadata().partition_columns) != list(staged.partition_by):
            raise InvalidArgumentError(
                f"Delta table {self.uri} is partitioned by "
                f"{list(dt.metadata().partition_columns)}, the staged files by "
                f"{staged.partition_by}")
        self._check_schema(dt, staged.schema)
        prefix = staged.location[len(self.uri):].strip("/")
        actions = [AddAction(f"{prefix}/{f.path}", f.size, dict(f.partition_values),
                             f.modification_time, True,
                             json.dumps({"numRecords": f.records}))
                   for f in staged.files]
        props = CommitProperties(custom_metadata={COMMIT_INFO_KEY: record.to_doc()},
                                 app_transactions=[Transaction(record.app_id, record.version)])
        try:
            dt.create_write_transaction(actions, "append", dt.schema(),
                                        partition_by=list(staged.partition_by) or None,
                                        commit_properties=props)
        except CommitFailedError as exc:
            fresh = self.table()
            done = self._check_version(fresh, record)  # raises if another attempt won
            if done is not None:
                return done
            raise StorageError(f"Delta commit to {self.uri} failed: {exc}") from exc
        return record

    def cleanup(self, app_id: str, full: bool = False) -> int:
        """Delete run directories of ``app_id`` whose version was committed by another
        attempt (per the Delta history). Runs at a version not yet committed may still
        be in progress and are left alone.

        Every run cleans up before planning and after committing, so failed attempts
        are always among the last few versions: only the last :data:`CLEANUP_WINDOW`
        committed versions are examined (a bounded history read), or all with ``full``.
        """
        validate_app_id(app_id)
        dt = self.table()
        committed = None if dt is None else dt.transaction_version(app_id)
        if committed is None:
            return 0
        lowest = 0 if full else committed - CLEANUP_WINDOW + 1
        runs = self.fileio.join(self.uri, RUNS_DIR, app_id)
        candidates = []
        for info in self.fileio.list(runs):
            parsed = parse_attempt_dir_name(info.name)
            if parsed is not None and lowest <= parsed[0] <= committed:
                candidates.append((parsed, info.path))
        if not candidates:
            return 0
        oldest = min(v for (v, _), _ in candidates)
        winners = {r.version: r.attempt for r in self._commits(dt, app_id, oldest)}
        removed = 0
        for (version, attempt), path in candidates:
            if version in winners and winners[version] != attempt:
                removed += self._delete_quietly(path)
        return removed

    def applications(self) -> list[str]:
        """Applications with a sparklog commit in the table's history."""
        dt = self.table()
        if dt is None:
            return []
        return sorted({r.app_id for r in self._commits(dt)})
