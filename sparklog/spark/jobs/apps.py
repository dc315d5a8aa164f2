"""Applications seen from their output: which committed there, their offsets and lag.

An exactly-once job keeps its offsets in its output, not in a broker's consumer group;
these functions read them back so that ``sparklog groups describe`` can show
applications beside broker-managed groups (Kafka's columns: TOPIC, PARTITION,
CURRENT-OFFSET, LOG-END-OFFSET, LAG).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import InvalidArgumentError
from ...names import validate_app_id
from ...storage import open_fileio
from .sink import Sink, normalize_uri

FORMATS = ("delta", "parquet")


def open_sink(output_uri, format: str | None = None, **options) -> Sink:
    """The sink for ``output_uri``: ``format`` ``delta`` or ``parquet``, or None to
    detect it from an existing output (``_delta_log`` or ``_sparklog/manifests``).
    ``options`` go to the sink's constructor (``partition_by``...)."""
    uri = normalize_uri(output_uri)
    if format is None:
        fileio = open_fileio(uri)
        if fileio.exists(fileio.join(uri, "_delta_log")):
            format = "delta"
        elif fileio.exists(fileio.join(uri, "_sparklog", "manifests")):
            format = "parquet"
        else:
            raise InvalidArgumentError(
                f"{uri} holds no exactly-once job output (no Delta table, no sparklog "
                "manifests); pass the format to create one")
    if format == "delta":
        from .delta_sink import DeltaSink

        return DeltaSink(uri, **options)
    if format == "parquet":
        from .parquet_sink import ParquetSink

        return ParquetSink(uri, **options)
    raise InvalidArgumentError(f"output format {format!r} must be one of {FORMATS}")


@dataclass(frozen=True)
class PartitionLag:
    """One partition of an application: the committed (next) offset, the log end
    offset and the lag; None where unknown (no broker/storage given, never committed)."""

    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int | None

    @property
    def lag(self) -> int | None:
        """Offsets not yet committed to the output."""
        if self.current_offset is None or self.log_end_offset is None:
            return None
        return max(self.log_end_offset - self.current_offset, 0)


@dataclass(frozen=True)
class ApplicationDescription:
    """An application's state in one output."""

    app_id: str
    output: str
    format: str
    version: int | None
    committed_at: int | None
    partitions: list = field(default_factory=list)

    @property
    def total_lag(self) -> int | None:
        """Sum of the known lags (None if none is known)."""
        lags = [p.lag for p in self.partitions if p.lag is not None]
        return sum(lags) if lags else None


def list_applications(output_uri, format: str | None = None) -> list[str]:
    """Ids of the applications that committed to ``output_uri``."""
    return open_sink(output_uri, format).applications()


def describe_application(output_uri, app_id: str, *, path: str | None = None,
                         bootstrap_servers: str | None = None, log_end_offsets=None,
                         format: str | None = None) -> ApplicationDescription:
    """Committed offsets of ``app_id`` in ``output_uri`` and, given the log's storage
    root ``path`` or a broker, the log end offsets and lag of every partition of the
    topics it consumed (partitions it never read show CURRENT-OFFSET None).

    ``log_end_offsets``, instead of ``path``/``bootstrap_servers``: a callable taking the
    committed ``[(topic, partition), ...]`` and returning ``{(topic, partition): offset}``
    (e.g. an admin client's ListOffsets ``latest``).
    """
    validate_app_id(app_id)
    sink = open_sink(output_uri, format)
    last = sink.last_commit(app_id)
    committed = dict(last.offsets) if last is not None else {}
    ends = {}
    if committed and log_end_offsets is not None:
        ends = {tuple(tp): int(o) for tp, o in log_end_offsets(sorted(committed)).items()}
    elif committed and (path or bootstrap_servers):
        ends = _log_end_offsets(sorted({t for t, _ in committed}), path, bootstrap_servers)
    keys = sorted(set(committed) | set(ends))
    rows = [PartitionLag(t, p, committed.get((t, p)), ends.get((t, p))) for t, p in keys]
    return ApplicationDescription(app_id, sink.uri, sink.format,
                                  last.version if last else None,
                                  last.committed_at if last else None, rows)


def _log_end_offsets(topics: list, path, bootstrap_servers) -> dict:
    """{(topic, partition): high watermark} of the existing ``topics``."""
    from ..source.catalogs import open_catalog
    from ..source.options import parse_options
    from ..source.planning import partition_states, subscribed_partitions

    where = {"path": path} if path else {"bootstrap.servers": bootstrap_servers}
    opts = parse_options({**where, "subscribe": ",".join(topics)}, streaming=None)
    catalog = open_catalog(opts)
    try:
        states = partition_states(catalog, subscribed_partitions(catalog, opts.subscription))
    finally:
        catalog.close()
    return {tp: st.high_watermark for tp, st in states.items()}
