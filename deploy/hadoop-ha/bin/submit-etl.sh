#!/usr/bin/env bash
# Run one exactly-once sparklog ETL job on YARN (cluster deploy mode).
#
# Usage: submit-etl.sh [--dry-run] [--master M] [--queue Q] [--conf KEY=VALUE ...]
#                      -- ETL-ARGS...
#   ETL-ARGS are those of `sparklog etl run` (see docs/exactly-once.md), e.g.
#     -- --app-id clicks-hourly --subscribe clicks --path hdfs://ns1/sparklog \
#        --output hdfs://ns1/warehouse/clicks --format delta --sql "SELECT ... FROM input"
#   --dry-run  print the spark-submit command instead of running it
#   --master   yarn (default: cluster deploy mode with sparklog/spark-defaults.conf and
#              the venv of bin/pack-venv.sh) or a local master such as "local[2]" (the
#              same job in client mode on this host, with this host's sparklog)
#   --queue    YARN queue (default: the cluster's default queue)
#   --conf     extra Spark settings (repeatable), after sparklog/spark-defaults.conf
#
# SPARK_SUBMIT names the spark-submit to run (default: $SPARK_HOME/bin/spark-submit, or
# spark-submit on PATH).
#
# The job commits the offsets it read together with its output, so running it again
# after any failure (the script's, the application master's, an RM failover) neither
# loses nor repeats a record. The exit status is the application's final status.
# Needs spark-submit and the `sparklog` command, on YARN also the `hadoop` command.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
DEPLOY="$(dirname "$HERE")"
DRY_RUN=0
MASTER=yarn
EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) DRY_RUN=1 ;;
        --master) MASTER="$2"; shift ;;
        --queue) EXTRA+=(--queue "$2"); shift ;;
        --conf) EXTRA+=(--conf "$2"); shift ;;
        --) shift; break ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        *) echo "submit-etl.sh: unknown argument $1 (ETL arguments go after --)" >&2; exit 2 ;;
    esac
    shift
done
ETL_ARGS=("$@")

APP_ID=""
for ((i = 0; i < ${#ETL_ARGS[@]}; i++)); do
    case "${ETL_ARGS[$i]}" in
        --app-id) APP_ID="${ETL_ARGS[$((i + 1))]:-}" ;;
        --app-id=*) APP_ID="${ETL_ARGS[$i]#--app-id=}" ;;
    esac
done
if [ -z "$APP_ID" ]; then
    echo "submit-etl.sh: the ETL arguments need --app-id (it names the job's commits)" >&2
    exit 2
fi
for arg in "${ETL_ARGS[@]}"; do
    if [ "$arg" = "--master" ]; then
        echo "submit-etl.sh: --master is spark-submit's here: give it before --" >&2
        exit 2
    fi
done

SPARK_SUBMIT="${SPARK_SUBMIT:-${SPARK_HOME:+$SPARK_HOME/bin/}spark-submit}"
if [ "$MASTER" = yarn ]; then
    # The Hadoop jars listed one by one (no "dir/*" entries) for JVMs of the Python
    # workers; Spark appends a CLASSPATH given this way to the container's own.
    if [ "$DRY_RUN" = 1 ]; then
        HADOOP_CP='$(hadoop classpath --glob)'
    else
        HADOOP_CP="$(hadoop classpath --glob)"
    fi
    # Under simple authentication the JVMs act as the submitting user through YARN's
    # tokens, but delta-rs's HDFS client (the Delta commit, in the driver) takes its
    # user from HADOOP_USER_NAME, else from the container's OS user (the NodeManager's
    # unless the LinuxContainerExecutor runs it as the submitter): name the submitter.
    USER_NAME="${HADOOP_USER_NAME:-$(id -un)}"
    MODE=(--master yarn --deploy-mode cluster
          --properties-file "$DEPLOY/sparklog/spark-defaults.conf"
          --conf "spark.executorEnv.CLASSPATH=$HADOOP_CP"
          --conf "spark.yarn.appMasterEnv.CLASSPATH=$HADOOP_CP"
          --conf "spark.yarn.appMasterEnv.HADOOP_USER_NAME=$USER_NAME"
          --conf "spark.executorEnv.HADOOP_USER_NAME=$USER_NAME"
          --conf spark.yarn.submit.waitAppCompletion=true)
else  # a local master: the driver on this host, with this host's Python and sparklog
    MODE=(--master "$MASTER" --deploy-mode client)
fi

# The JVM columnar reader of format("sparklog") (docs/spark.md), built once on this node.
JVM_READER=()
if [ "$DRY_RUN" = 1 ]; then
    JVM_READER=(--jars '$(sparklog spark-jar)')
elif JAR="$(sparklog spark-jar 2>/dev/null)"; then
    JVM_READER=(--jars "$JAR")
else
    echo "submit-etl.sh: 'sparklog spark-jar' gave no jar (no JDK here?): the job's" \
         "scans run on the Python reader" >&2
fi

CMD=("$SPARK_SUBMIT"
     "${MODE[@]}"
     --name "sparklog-etl-$APP_ID"
     ${JVM_READER[@]+"${JVM_READER[@]}"}
     ${EXTRA[@]+"${EXTRA[@]}"}
     "$DEPLOY/sparklog/etl_driver.py"
     "${ETL_ARGS[@]}")

if [ "$DRY_RUN" = 1 ]; then
    printf '%q ' "${CMD[@]}"
    echo
    exit 0
fi
exec "${CMD[@]}"
