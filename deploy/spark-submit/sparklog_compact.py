"""spark-submit entry point of ``sparklog compact TOPIC --spark`` (log compaction of a
compacted topic's partitions as Spark jobs; see deploy/spark-submit/README.md)::

    spark-submit --master yarn --deploy-mode cluster \
        --archives sparklog-env.tar.gz#env \
        --conf spark.yarn.appMasterEnv.PYSPARK_PYTHON=./env/bin/python \
        --conf spark.executorEnv.PYSPARK_PYTHON=./env/bin/python \
        sparklog_compact.py changelog --storage hdfs://nn/sparklog [--partitions 0,3] [--force]

It takes the arguments of ``sparklog compact`` and runs it with ``--spark`` in the
session spark-submit made. Exit status 0 when every partition was cleaned or had
nothing due, 1 when one was skipped (a live broker leads it: its cleaner compacts it).
"""

import sys

from sparklog.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["compact", *sys.argv[1:], "--spark"]))
