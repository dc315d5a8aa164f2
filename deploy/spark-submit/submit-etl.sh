#!/usr/bin/env bash
# Submit sparklog's exactly-once incremental job to YARN with a packed Python environment.
#
#   SPARKLOG_ENV_ARCHIVE  a venv-pack/conda-pack archive holding sparklog[spark]
#                         (default: sparklog-env.tar.gz in the current directory)
#   SPARK_SUBMIT          the spark-submit to use (default: spark-submit on PATH)
#   MASTER, DEPLOY_MODE   default yarn / cluster
#
# A second YARN application attempt after a lost driver is safe: the job commits its
# offsets with its output, so the attempt resumes exactly where the output ends.
#
# Every argument is passed to the job (the arguments of `sparklog etl run`), e.g.
#   submit-etl.sh --subscribe events --app-id events-hourly --path hdfs://nn/sparklog \
#       --output hdfs://nn/warehouse/events --format delta --sql "SELECT * FROM input"
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
archive="${SPARKLOG_ENV_ARCHIVE:-sparklog-env.tar.gz}"
# the JVM columnar reader of format("sparklog") (docs/spark.md), when a JDK can build it
jvm_reader=()
if jar="$(sparklog spark-jar 2>/dev/null)"; then
    jvm_reader=(--jars "$jar")
fi
exec "${SPARK_SUBMIT:-spark-submit}" \
    --master "${MASTER:-yarn}" --deploy-mode "${DEPLOY_MODE:-cluster}" \
    --name "sparklog-etl" \
    --archives "${archive}#env" \
    --conf spark.yarn.appMasterEnv.PYSPARK_PYTHON=./env/bin/python \
    --conf spark.executorEnv.PYSPARK_PYTHON=./env/bin/python \
    --conf spark.yarn.maxAppAttempts=2 \
    ${jvm_reader[@]+"${jvm_reader[@]}"} \
    "${here}/sparklog_etl.py" "$@"
