"""The sink contract of exactly-once jobs, and the Spark staging step both sinks share.

A run of an application ``A`` that wants transaction version ``n``:

1. **stage** -- Spark writes the result as Parquet files into a location of its own
   (``attempt`` is a fresh id), invisible to readers of the output;
2. **commit** -- the driver makes the staged files and the :class:`CommitRecord`
   (offsets) visible in ONE atomic step that succeeds only if ``A`` has not committed
   version ``n`` yet: a Delta transaction carrying the application transaction
   ``(A, n)``, or the create-if-absent of manifest ``n`` of ``A``. The loser of two
   concurrent runs gets :class:`~sparklog.errors.ConcurrentTransactionsError`; a commit
   retried after it succeeded (same attempt) is a no-op;
3. **cleanup** -- files of failed or losing attempts are deleted (never before the
   version they wanted is committed by someone, so a slow concurrent run is not
   sabotaged into a dangling commit).
"""

from __future__ import annotations

import abc
import logging
import pathlib
from urllib.parse import unquote

import pyarrow as pa

from ...errors import ConcurrentTransactionsError, InvalidArgumentError
from ...storage import open_fileio
from ...storage.paths import check_path, url_scheme
from .records import CommitRecord, DataFile, StagedFiles

log = logging.getLogger(__name__)

#: Hive's directory name of a NULL partition value.
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


def normalize_uri(uri) -> str:
    """An output URI as both Spark and the storage layer take it: a plain path becomes
    an absolute ``file://`` URL; a trailing '/' is dropped."""
    uri = check_path(uri, "output URI")
    if not url_scheme(uri):
        return pathlib.Path(uri).absolute().as_uri()
    stripped = uri.rstrip("/")
    return uri if stripped.endswith(":") else stripped


def attempt_dir_name(version: int, attempt: str) -> str:
    """Directory name of one attempt at ``version``: ``<version:010d>-<attempt>``."""
    return f"{version:010d}-{attempt}"


def parse_attempt_dir_name(name: str) -> tuple[int, str] | None:
    """(version, attempt) of an attempt directory name, None if it is not one."""
    version, sep, attempt = name.partition("-")
    if not sep or not version.isdigit() or not attempt:
        return None
    return int(version), attempt


def nullable_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every field nullable, recursively -- what Spark's Parquet writer
    stores (it writes ``schema.asNullable``)."""

    def fix_type(t):
        if pa.types.is_struct(t):
            return pa.struct([fix_field(t.field(i)) for i in range(t.num_fields)])
        if pa.types.is_large_list(t):
            return pa.large_list(fix_field(t.value_field))
        if pa.types.is_list(t):
            return pa.list_(fix_field(t.value_field))
        if pa.types.is_map(t):
            return pa.map_(t.key_type, fix_field(t.item_field))
        return t

    def fix_field(f):
        return pa.field(f.name, fix_type(f.type), nullable=True, metadata=f.metadata)

    return pa.schema([fix_field(f) for f in schema], metadata=schema.metadata)


def spark_arrow_schema(df) -> pa.Schema:
    """The Arrow schema of Spark DataFrame ``df`` as written to Parquet."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return nullable_schema(to_arrow_schema(df.schema))


def write_parquet(df, location: str, partition_by=()) -> None:
    """Spark writes ``df`` as Parquet into the new directory ``location``.

    Timestamps are written as TIMESTAMP_MICROS (as Delta writers do) rather than Spark's
    legacy INT96: this sets ``spark.sql.parquet.outputTimestampType`` on the session
    when it is still INT96.
    """
    conf = df.sparkSession.conf
    key = "spark.sql.parquet.outputTimestampType"
    if conf.get(key, "INT96") == "INT96":
        conf.set(key, "TIMESTAMP_MICROS")
    writer = df.write.mode("errorifexists").format("parquet")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.save(location)


def _partition_values(rel_dir: str) -> dict:
    values = {}
    for part in filter(None, rel_dir.split("/")):
        key, sep, value = part.partition("=")
        if sep:
            value = unquote(value)
            values[unquote(key)] = None if value == HIVE_NULL else value
    return values


def _row_count(fileio, path: str) -> int:
    import pyarrow.parquet as pq

    local = fileio.local_path(path)
    if local is not None:
        return pq.read_metadata(local).num_rows
    stream = fileio.open_input(path)
    try:
        return pq.read_metadata(pa.PythonFile(stream, mode="r")).num_rows
    finally:
        stream.close()


def list_data_files(fileio, location: str) -> list[DataFile]:
    """The Parquet files under ``location`` (recursively, skipping hidden ``_``/``.``
    names such as ``_SUCCESS``, ``_temporary`` and checksum files), sorted by path,
    with their row counts from the Parquet footers."""
    out = []
    stack = [("", location)]
    while stack:
        rel, url = stack.pop()
        for info in fileio.list(url):
            if info.name.startswith(("_", ".")):
                continue
            if info.is_dir:
                stack.append((f"{rel}{info.name}/", info.path))
            elif info.name.endswith(".parquet"):
                out.append(DataFile(rel + info.name, info.size, int(info.mtime * 1000),
                                    _row_count(fileio, info.path), _partition_values(rel)))
    return sorted(out, key=lambda f: f.path)


class Sink(abc.ABC):
    """An output that commits Spark-written files atomically with offsets.

    ``uri``: the output (a plain path, ``file://``, ``hdfs://`` or ``webhdfs://``);
    ``partition_by``: Hive partition columns of the output.
    """

    #: Name of the format (``delta`` or ``parquet``).
    format = ""

    def __init__(self, uri, partition_by=None):
        self.uri = normalize_uri(uri)
        self.fileio = open_fileio(self.uri)
        if isinstance(partition_by, str):
            partition_by = [partition_by]
        self.partition_by = list(partition_by or [])
        for col in self.partition_by:
            if not isinstance(col, str) or not col:
                raise InvalidArgumentError(
                    f"partition_by must name columns, got {partition_by!r}")

    # --- the contract --------------------------------------------------------------
    @abc.abstractmethod
    def last_commit(self, app_id: str) -> CommitRecord | None:
        """The newest commit of ``app_id`` in the output, None if it never committed."""

    @abc.abstractmethod
    def staging_location(self, app_id: str, version: int, attempt: str) -> str:
        """Where Spark writes the files of one attempt (unseen by readers)."""

    @abc.abstractmethod
    def commit(self, staged: StagedFiles, record: CommitRecord) -> CommitRecord:
        """Atomically publish ``staged`` with ``record``; return the record committed.

        ConcurrentTransactionsError if another attempt committed ``record.version`` of
        the application (or a later one) first; a no-op returning the stored record if
        this very attempt already committed it (a retried commit).
        """

    @abc.abstractmethod
    def cleanup(self, app_id: str, full: bool = False) -> int:
        """Delete the files of failed or losing attempts of ``app_id`` whose version is
        already committed; return the number of attempt directories removed. ``full``
        examines every version, not only the recent ones a run can have left."""

    @abc.abstractmethod
    def applications(self) -> list[str]:
        """Ids of the applications that committed to this output, sorted."""

    def validate(self, df) -> None:
        """Check the job's result ``df`` against the existing output before anything is
        written (schema, partitioning); the base class accepts everything."""

    def table_version(self) -> int | None:
        """The output's own version (a Delta table's), None where it has none."""
        return None

    # --- shared steps ----------------------------------------------------------------
    def committed_version(self, app_id: str) -> int | None:
        """The transaction version ``app_id`` committed last (None if none)."""
        last = self.last_commit(app_id)
        return None if last is None else last.version

    def stage(self, df, app_id: str, version: int, attempt: str) -> StagedFiles:
        """Spark writes ``df`` into this attempt's staging location; return its files."""
        from .faults import with_mid_write_fault

        missing = [c for c in self.partition_by if c not in df.columns]
        if missing:
            raise InvalidArgumentError(
                f"partition columns {missing} are not columns of the job's result "
                f"{df.columns} (output {self.uri})")
        location = self.staging_location(app_id, version, attempt)
        try:
            write_parquet(with_mid_write_fault(df), location, self.partition_by)
            files = list_data_files(self.fileio, location)
        except BaseException as exc:
            self._delete_quietly(location)
            self._raise_if_lost(app_id, version, exc)
            raise
        return StagedFiles(app_id, version, attempt, location, files,
                           spark_arrow_schema(df), list(self.partition_by))

    def _raise_if_lost(self, app_id: str, version: int, exc: BaseException) -> None:
        """A concurrent run that committed ``version`` first removes the staging
        directories of the other attempts at that version (its cleanup), which makes
        their writes fail: report such a failure as the lost race it is."""
        if not isinstance(exc, Exception):
            return
        try:
            committed = self.committed_version(app_id)
        except Exception:  # noqa: BLE001 - the original error is the one to report
            return
        if committed is not None and committed >= version:
            raise ConcurrentTransactionsError(
                f"version {version} of application {app_id!r} in {self.uri} was "
                f"committed by another run while this one was writing") from exc

    def abort(self, staged: StagedFiles) -> None:
        """Delete the files of an attempt that will not commit (best effort)."""
        self._delete_quietly(staged.location)

    def _delete_quietly(self, location: str) -> bool:
        """Delete an attempt's directory, best effort: False (and a warning) when it
        fails, e.g. because that attempt's Spark tasks are still creating files in it
        (a concurrent run that lost the commit race); the next run's cleanup retries."""
        try:
            self.fileio.delete(location, recursive=True)
            return True
        except OSError as exc:
            log.warning("could not delete %s (the next run's cleanup will): %s", location, exc)
            return False

    def __repr__(self):
        return f"{type(self).__name__}({self.uri!r})"
