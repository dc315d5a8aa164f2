#!/usr/bin/env bash
# Bring up the HA cluster and the sparklog brokers, in dependency order:
#
#   services                      the kit's systemd units installed on every host
#                                 ($SYSTEMD_UNIT_DIR), each host's roles enabled
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
#   sparklog brokers              sparklog-broker@<id>
#
# Usage: start-cluster.sh [--init] [--dry-run] [--env FILE]
#   --init     first start of a new cluster: formats HDFS (destroys an existing namespace)
#   --dry-run  print the commands instead of running them
#   --env      host lists (default: ../cluster.env beside this script)
# Every daemon runs as a systemd service (systemd/ of the kit: hadoop-hdfs@<daemon>,
# hadoop-yarn@<daemon>, zookeeper, sparklog-broker@<id>), enabled on its hosts, so a
# rebooted host starts its daemons again by itself. Each remote command runs as
# `ssh $SSH_USER@host sudo -n -u <user> <command>`, or, when the env file sets
# REMOTE_COMMAND, as `$REMOTE_COMMAND <host> <user> <command>` (another transport:
# deploy/lab/lab.py runs commands inside a network namespace that way).
# Run bin/check-config.py first; bin/stop-cluster.sh stops in the reverse order.
set -euo pipefail

SCRIPT=start-cluster.sh
USAGE_LINES=28
# shellcheck source=cluster-common.sh
source "$(dirname "$0")/cluster-common.sh"

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

step "services: the kit's systemd units on every host, each host's roles enabled"
unit_files=$(cd "$KIT/systemd" && echo *)
for h in $(all_hosts); do
    # shellcheck disable=SC2046  # one unit name per word
    echo "   [$h as root] install $unit_files into $SYSTEMD_UNIT_DIR;" \
         "systemctl daemon-reload; systemctl enable" $(units_of "$h")
    [ "$DRY_RUN" = 1 ] && continue
    # shellcheck disable=SC2086  # the file names, one per word
    tar -C "$KIT/systemd" --owner=0 --group=0 --mode=0644 -cf - $unit_files | on "$h" root sh -c \
        "mkdir -p $SYSTEMD_UNIT_DIR && tar -C $SYSTEMD_UNIT_DIR -xof - &&
         systemctl daemon-reload && systemctl enable $(units_of "$h" | tr '\n' ' ')"
done

step "ZooKeeper ensemble"
for h in $ZK_HOSTS; do service start "$h" zookeeper.service; done
for h in $ZK_HOSTS; do
    wait_for "ZooKeeper on $h serving" "$h" "$ZOOKEEPER_USER" "$ZOOKEEPER_HOME/bin/zkServer.sh" status
done

step "JournalNodes"
for h in $JN_HOSTS; do service start "$h" hadoop-hdfs@journalnode.service; done

if [ "$INIT" = 1 ]; then
    step "format the namespace on $NN1 and the ZKFC znode (--init)"
    remote "$NN1" "$HDFS_USER" "${HDFS[@]}" namenode -format -nonInteractive
    remote "$NN1" "$HDFS_USER" "${HDFS[@]}" zkfc -formatZK -nonInteractive
fi

step "NameNode on $NN1"
service start "$NN1" hadoop-hdfs@namenode.service
wait_for "NameNode on $NN1 up (standby until the ZKFCs run)" "$NN1" "$HDFS_USER" \
    sh -c "${HDFS[*]} haadmin -getAllServiceState | grep -q standby"

if [ "$INIT" = 1 ]; then
    step "copy the namespace to $NN2 (--init)"
    remote "$NN2" "$HDFS_USER" "${HDFS[@]}" namenode -bootstrapStandby -nonInteractive
fi
step "NameNode on $NN2"
service start "$NN2" hadoop-hdfs@namenode.service

step "ZKFCs (automatic failover; one NameNode becomes active)"
for h in "$NN1" "$NN2"; do service start "$h" hadoop-hdfs@zkfc.service; done
wait_for "an active NameNode" "$NN1" "$HDFS_USER" \
    sh -c "${HDFS[*]} haadmin -getAllServiceState | grep -q active"

step "DataNodes"
for h in $DN_HOSTS; do service start "$h" hadoop-hdfs@datanode.service; done
remote "$NN1" "$HDFS_USER" "${HDFS[@]}" dfsadmin -safemode wait

step "ResourceManagers"
for h in $RM_HOSTS; do service start "$h" hadoop-yarn@resourcemanager.service; done
first_rm="${RM_HOSTS%% *}"
wait_for "an active ResourceManager" "$first_rm" "$YARN_USER" \
    sh -c "${YARN[*]} rmadmin -getAllServiceState | grep -q active"

step "NodeManagers"
for h in $NM_HOSTS; do service start "$h" hadoop-yarn@nodemanager.service; done
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
    service start "$host" "sparklog-broker@$id.service"
done
echo "== cluster started ($STEP steps)"
