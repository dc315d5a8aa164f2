"""The read side of ``format("sparklog")``: batch and streaming scans of topics.

The data source itself (:mod:`sparklog.spark.datasource`, registered with
``sparklog.spark.register(spark)``) sits above this package and the write path.
Modules: :mod:`.options` (Kafka-named options), :mod:`.schema` (output schema, batch
shaping), :mod:`.catalog` (offsets from storage or a broker; :mod:`.catalogs` picks
one), :mod:`.planning` (offset ranges, data loss, splits), :mod:`.filters` (pushdown),
:mod:`.scan` (task-side reads), :mod:`.batch` and :mod:`.stream` (the readers),
:mod:`.zipcache` (Spark's Python workers stop re-reading zip archives per call;
installed on import, in workers only).
"""

from . import zipcache

zipcache.install()
