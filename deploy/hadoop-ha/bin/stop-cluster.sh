#!/usr/bin/env bash
# Stop the HA cluster and the sparklog brokers: start-cluster.sh's order reversed.
#
#   sparklog brokers              systemctl stop: each syncs and closes its segments,
#                                 releases its leases and leaves ZooKeeper
#   NodeManagers, ResourceManagers
#   DataNodes
#   ZKFCs on NN2 and NN1          before the NameNodes: no failover when they stop
#   NameNodes NN2 and NN1
#   JournalNodes
#   ZooKeeper ensemble            last: everything above coordinates through it
#
# Usage: stop-cluster.sh [--dry-run] [--env FILE]
#   --dry-run  print the commands instead of running them
#   --env      host lists (default: ../cluster.env beside this script)
# The services stay enabled: a host that reboots starts its daemons again (systemctl
# disable them on a host that is to stay down). Remote commands as in start-cluster.sh.
set -euo pipefail

SCRIPT=stop-cluster.sh
USAGE_LINES=17
# shellcheck source=cluster-common.sh
source "$(dirname "$0")/cluster-common.sh"

reverse() { printf '%s\n' "$@" | tac; }

step "sparklog brokers"
for pair in $(reverse $BROKERS); do
    service stop "${pair#*:}" "sparklog-broker@${pair%%:*}.service"
done

step "NodeManagers"
for h in $(reverse $NM_HOSTS); do service stop "$h" hadoop-yarn@nodemanager.service; done

step "ResourceManagers"
for h in $(reverse $RM_HOSTS); do service stop "$h" hadoop-yarn@resourcemanager.service; done

step "DataNodes"
for h in $(reverse $DN_HOSTS); do service stop "$h" hadoop-hdfs@datanode.service; done

step "ZKFCs (before the NameNodes: a NameNode stopping is no failure to act on)"
for h in "$NN2" "$NN1"; do service stop "$h" hadoop-hdfs@zkfc.service; done

step "NameNodes"
for h in "$NN2" "$NN1"; do service stop "$h" hadoop-hdfs@namenode.service; done

step "JournalNodes"
for h in $(reverse $JN_HOSTS); do service stop "$h" hadoop-hdfs@journalnode.service; done

step "ZooKeeper ensemble"
for h in $(reverse $ZK_HOSTS); do service stop "$h" zookeeper.service; done
echo "== cluster stopped ($STEP steps)"
