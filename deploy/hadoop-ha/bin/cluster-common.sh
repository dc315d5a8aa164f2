# Sourced by start-cluster.sh and stop-cluster.sh: their options, cluster.env, the
# remote transport and the systemd units of each host's roles. Not run by itself.
#
# Options: [--dry-run] [--env FILE] (and --init, which only start-cluster.sh accepts)
# Each remote command runs as `ssh $SSH_USER@host sudo -n -u <user> <command>`, or, when
# the env file sets REMOTE_COMMAND, as `$REMOTE_COMMAND <host> <user> <command>` (another
# transport: deploy/lab/lab.py runs commands inside a network namespace that way).

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KIT="$(dirname "$HERE")"
ENV_FILE="$KIT/cluster.env"
INIT=0
DRY_RUN=0
while [ $# -gt 0 ]; do
    case "$1" in
        --init) [ "$SCRIPT" = start-cluster.sh ] || {
                    echo "$SCRIPT: unknown argument: $1" >&2; exit 2; }
                INIT=1 ;;
        --dry-run) DRY_RUN=1 ;;
        --env) ENV_FILE="$2"; shift ;;
        -h|--help) sed -n "2,${USAGE_LINES}p" "$0"; exit 0 ;;
        *) echo "$SCRIPT: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done
[ -r "$ENV_FILE" ] || { echo "$SCRIPT: cannot read $ENV_FILE" >&2; exit 2; }
# shellcheck source=/dev/null
source "$ENV_FILE"
for var in SSH_USER HADOOP_HOME HADOOP_CONF_DIR ZOOKEEPER_HOME SYSTEMD_UNIT_DIR HDFS_USER \
           YARN_USER ZOOKEEPER_USER ZK_HOSTS JN_HOSTS NN1 NN2 DN_HOSTS RM_HOSTS NM_HOSTS \
           BROKERS SPARKLOG_USER SPARKLOG_GROUP SPARKLOG_ROOT; do
    [ -n "${!var:-}" ] || { echo "$SCRIPT: $var is not set in $ENV_FILE" >&2; exit 2; }
done
HDFS=("$HADOOP_HOME/bin/hdfs" --config "$HADOOP_CONF_DIR")
YARN=("$HADOOP_HOME/bin/yarn" --config "$HADOOP_CONF_DIR")
STEP=0

step() { STEP=$((STEP + 1)); echo "== step $STEP: $*"; }

# on HOST USER COMMAND...: run COMMAND on HOST as USER (each argument quoted for the
# remote shell, which ssh hands one string); the standard input goes with it
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

# service ACTION HOST UNIT...: systemctl ACTION on HOST (as root)
service() {
    local action="$1" host="$2"; shift 2
    remote "$host" root systemctl "$action" "$@"
}

# units_of HOST: the systemd units of HOST's roles, in start order
units_of() {
    local host="$1" h pair
    for h in $ZK_HOSTS; do [ "$h" = "$host" ] && echo zookeeper.service; done
    for h in $JN_HOSTS; do [ "$h" = "$host" ] && echo hadoop-hdfs@journalnode.service; done
    if [ "$host" = "$NN1" ] || [ "$host" = "$NN2" ]; then
        echo hadoop-hdfs@namenode.service
        echo hadoop-hdfs@zkfc.service
    fi
    for h in $DN_HOSTS; do [ "$h" = "$host" ] && echo hadoop-hdfs@datanode.service; done
    for h in $RM_HOSTS; do [ "$h" = "$host" ] && echo hadoop-yarn@resourcemanager.service; done
    for h in $NM_HOSTS; do [ "$h" = "$host" ] && echo hadoop-yarn@nodemanager.service; done
    for pair in $BROKERS; do
        [ "${pair#*:}" = "$host" ] && echo "sparklog-broker@${pair%%:*}.service"
    done
    return 0
}

# every host of the cluster, each once
all_hosts() {
    local pair
    { for h in $ZK_HOSTS $JN_HOSTS $NN1 $NN2 $DN_HOSTS $RM_HOSTS $NM_HOSTS; do echo "$h"; done
      for pair in $BROKERS; do echo "${pair#*:}"; done; } | awk '!seen[$0]++'
}
