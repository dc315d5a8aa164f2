"""spark-submit's primary file for ``sparklog compact TOPIC --spark`` (log compaction of a
compacted topic's partitions as Spark jobs; see deploy/hadoop-ha/README.md), submitted
like etl_driver.py, with the kit's spark-defaults.conf and the venv of bin/pack-venv.sh::

    spark-submit --master yarn --deploy-mode cluster \
        --properties-file sparklog/spark-defaults.conf \
        sparklog/compact_driver.py changelog --storage hdfs://ns1/sparklog [--partitions 0,3]

It takes the arguments of ``sparklog compact`` and runs it with ``--spark`` in the
session spark-submit made. Exit status 0 when every partition was cleaned or had
nothing due, 1 when one was skipped (a live broker leads it: its cleaner compacts it).
"""

import sys

from sparklog.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["compact", *sys.argv[1:], "--spark"]))
