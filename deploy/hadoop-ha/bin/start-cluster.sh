#!/usr/bin/env bash
# Bring up the HA cluster and the sparklog brokers, in dependency order:
#
#   ZooKeeper ensemble            everything below coordinates through it
#   JournalNodes                  the NameNodes' shared edit log
#   [--init] format NN1's namespace and the ZKFCs' znode
#   NameNode NN1                  standby until a ZKFC runs
#   [--init] NN2 copies NN1's namespace (bootstrapStandby)
#   NameNode NN2
#   ZKFCs on NN1 and NN2          one NameNode becomes active
#   DataNodes                     then wait until HDFS leaves safe mode
#   ResourceManagers, NodeManagers
#   [--init] the sparklog root directory on HDFS
#   sparklog brokers              sparklog-broker@<id> under systemd
#
# Usage: start-cluster.sh [--init] [--dry-run] [--env FILE]
#   --init     first start of a new cluster: formats HDFS (destroys an existing namespace)
#   --dry-run  print the commands instead of running them
#   --env      host lists (default: ../cluster.env beside this script)
# Each remote command runs as `ssh $SSH_USER@host sudo -n -u <user> <command>`, or, when
# the env file sets REMOTE_COMMAND, as `$REMOTE_COMMAND <host> <user> <command>` (another
# transport: deploy/lab/lab.py runs commands inside a network namespace that way).
# Run bin/check-config.py first; stop in the reverse order.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ENV_FILE="$HERE/../cluster.env"
INIT=0
DRY_RUN=0
while [ $# -gt 0 ]; do
    case "$1" in
        --init) INIT=1 ;;
        --dry-run) DRY_RUN=1 ;;
        --env) ENV_FILE="$2"; shift ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "start-cluster.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done
[ -r "$ENV_FILE" ] || { echo "start-cluster.sh: cannot read $ENV_FILE" >&2; exit 2; }
# shellcheck source=/dev/null
source "$ENV_FILE"
for var in SSH_USER HADOOP_HOME HADOOP_CONF_DIR ZOOKEEPER_HOME HDFS_USER YARN_USER ZOOKEEPER_USER ZK_HOSTS \
           JN_HOSTS NN1 NN2 DN_HOSTS RM_HOSTS NM_HOSTS BROKERS SPARKLOG_USER SPARKLOG_GROUP \
           SPARKLOG_ROOT; do
    [ -n "${!var:-}" ] || { echo "start-cluster.sh: $var is not set in $ENV_FILE" >&2; exit 2; }
done
HDFS=("$HADOOP_HOME/bin/hdfs" --config "$HADOOP_CONF_DIR")
YARN=("$HADOOP_HOME/bin/yarn" --config "$HADOOP_CONF_DIR")
STEP=0

step() { STEP=$((STEP + 1)); echo "== step $STEP: $*"; }

# on HOST USER COMMAND...: run COMMAND on HOST as USER (each argument quoted for the
# remote shell, which ssh hands one string)
on() {
    local host="$1" user="$2"; shift 2
    if [ -n "${REMOTE_COMMAND:-}" ]; then
        local -a transport
        read -r -a transport <<< "$REMOTE_COMMAND"
        "${transport[@]}" "$host" "$user" "$@"
    else
        ssh -o BatchMode=yes "$SSH_USER@$host" "sudo -n -u $user $(printf '%q ' "$@")"
    fi
}

# remote HOST USER COMMAND...: print and run (only print with --dry-run)
remote() {
    echo "   [$1 as $2] ${*:3}"
    [ "$DRY_RUN" = 1 ] || on "$@"
}

# wait_for DESCRIPTION HOST USER COMMAND...: retry COMMAND until it succeeds (2 min)
wait_for() {
    local what="$1" host="$2" user="$3"; shift 3
    echo "   wait: $what"
    [ "$DRY_RUN" = 1 ] && return 0
    local i
    for i in $(seq 1 60); do
        if on "$host" "$user" "$@" >/dev/null 2>&1; then
            return 0
        fi
        sleep 2
    done
    echo "start-cluster.sh: gave up waiting for: $what" >&2
    exit 1
}

step "ZooKeeper ensemble"
for h in $ZK_HOSTS; do remote "$h" "$ZOOKEEPER_USER" "$ZOOKEEPER_HOME/bin/zkServer.sh" start; done
for h in $ZK_HOSTS; do
    wait_for "ZooKeeper on $h serving" "$h" "$ZOOKEEPER_USER" "$ZOOKEEPER_HOME/bin/zkServer.sh" status
done

step "JournalNodes"
for h in $JN_HOSTS; do remote "$h" "$HDFS_USER" "${HDFS[@]}" --daemon start journalnode; done

if [ "$INIT" = 1 ]; then
    step "format the namespace on $NN1 and the ZKFC znode (--init)"
    remote "$NN1" "$HDFS_USER" "${HDFS[@]}" namenode -format -nonInteractive
    remote "$NN1" "$HDFS_USER" "${HDFS[@]}" zkfc -formatZK -nonInteractive
fi

step "NameNode on $NN1"
remote "$NN1" "$HDFS_USER" "${HDFS[@]}" --daemon start namenode
wait_for "NameNode on $NN1 up (standby until the ZKFCs run)" "$NN1" "$HDFS_USER" \
    sh -c "${HDFS[*]} haadmin -getAllServiceState | grep -q standby"

if [ "$INIT" = 1 ]; then
    step "copy the namespace to $NN2 (--init)"
    remote "$NN2" "$HDFS_USER" "${HDFS[@]}" namenode -bootstrapStandby -nonInteractive
fi
step "NameNode on $NN2"
remote "$NN2" "$HDFS_USER" "${HDFS[@]}" --daemon start namenode

step "ZKFCs (automatic failover; one NameNode becomes active)"
for h in "$NN1" "$NN2"; do remote "$h" "$HDFS_USER" "${HDFS[@]}" --daemon start zkfc; done
wait_for "an active NameNode" "$NN1" "$HDFS_USER" \
    sh -c "${HDFS[*]} haadmin -getAllServiceState | grep -q active"

step "DataNodes"
for h in $DN_HOSTS; do remote "$h" "$HDFS_USER" "${HDFS[@]}" --daemon start datanode; done
remote "$NN1" "$HDFS_USER" "${HDFS[@]}" dfsadmin -safemode wait

step "ResourceManagers"
for h in $RM_HOSTS; do remote "$h" "$YARN_USER" "${YARN[@]}" --daemon start resourcemanager; done
first_rm="${RM_HOSTS%% *}"
wait_for "an active ResourceManager" "$first_rm" "$YARN_USER" \
    sh -c "${YARN[*]} rmadmin -getAllServiceState | grep -q active"

step "NodeManagers"
for h in $NM_HOSTS; do remote "$h" "$YARN_USER" "${YARN[@]}" --daemon start nodemanager; done
nm_count=$(wc -w <<< "$NM_HOSTS")
wait_for "$nm_count NodeManagers registered with the ResourceManager" "$first_rm" "$YARN_USER" \
    sh -c "${YARN[*]} node -list 2>/dev/null | grep -q 'Total Nodes:$nm_count\$'"

if [ "$INIT" = 1 ]; then
    step "sparklog root $SPARKLOG_ROOT on HDFS (--init)"
    # /apps readable by every job (the venv archive; umask 027 would close it), the ETL
    # user's home (Spark's .sparkStaging), its warehouse, and the NodeManagers' log
    # aggregation directory (yarn.nodemanager.remote-app-log-dir)
    remote "$NN1" "$HDFS_USER" "${HDFS[@]}" dfs -mkdir -p "$SPARKLOG_ROOT" /apps/sparklog \
        /spark-history /app-logs "/user/$SPARKLOG_USER" /warehouse
    remote "$NN1" "$HDFS_USER" "${HDFS[@]}" dfs -chown "$SPARKLOG_USER:$SPARKLOG_GROUP" \
        "$SPARKLOG_ROOT" /apps/sparklog "/user/$SPARKLOG_USER" /warehouse
    remote "$NN1" "$HDFS_USER" "${HDFS[@]}" dfs -chmod 750 "$SPARKLOG_ROOT"
    remote "$NN1" "$HDFS_USER" "${HDFS[@]}" dfs -chmod 755 /apps /apps/sparklog /user
    remote "$NN1" "$HDFS_USER" "${HDFS[@]}" dfs -chmod 1777 /spark-history /app-logs
fi

step "sparklog brokers"
for pair in $BROKERS; do
    id="${pair%%:*}"; host="${pair#*:}"
    remote "$host" root systemctl start "sparklog-broker@$id.service"
done
echo "== cluster started ($STEP steps)"
