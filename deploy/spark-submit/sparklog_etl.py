"""spark-submit entry point of sparklog's exactly-once incremental job.

Takes the arguments of ``sparklog etl run`` (see deploy/spark-submit/README.md)::

    spark-submit --master yarn --deploy-mode cluster \
        --archives sparklog-env.tar.gz#env \
        --conf spark.yarn.appMasterEnv.PYSPARK_PYTHON=./env/bin/python \
        --conf spark.executorEnv.PYSPARK_PYTHON=./env/bin/python \
        sparklog_etl.py --subscribe events --app-id events-hourly \
        --path hdfs://nn/sparklog --output hdfs://nn/warehouse/events \
        --format delta --sql "SELECT CAST(value AS STRING) AS v, timestamp FROM input"

Exit status 0 when the run committed or found nothing new, 1 on a sparklog error
(the message names the problem), and a traceback for anything else.
"""

import sys

from sparklog.cli.etl import submit_main

if __name__ == "__main__":
    sys.exit(submit_main(sys.argv[1:]))
