#!/usr/bin/env bash
# System packages the tests need beyond the Python virtual environment. Idempotent: does
# nothing when everything is present. Installs with apt-get only when running as root on
# a Debian-like system; otherwise says what is missing (the tests that need it skip and
# print why).
#
#   - zookeeper (Debian's package: /usr/share/java/zookeeper.jar and the jars it depends
#     on) and a Java runtime: the cluster-mode tests start a real ZooKeeper server
#     (tests/support/zkserver.py);
#   - a JDK (javac): the Spark tests build and use the JVM reader's jar
#     (sparklog/spark/jvm);
#   - Maven (mvn): the Java artifact sets of sparklog/maven come from Maven Central on
#     first use: Apache Hadoop's jars (the HDFS daemons of tests/support/hdfscluster.py and the
#     hdfs:// client), Apache Kafka's broker (tests/support/kafkaserver.py), Spark's Kafka source,
#     delta-spark and Hadoop's MiniKdc (the Kerberos KDC of tests/support/kdc.py: no
#     system Kerberos package is needed);
#   - OpenSSH's server (sshd), netcat (nc) and psmisc (fuser): the deploy kit's lab
#     (deploy/lab/lab.py, tests/deploy/test_lab.py) runs an sshd on each NameNode host,
#     through which the ZKFCs fence the old active NameNode (Hadoop's sshfence runs
#     `fuser -k -n tcp PORT` there, then `nc -z` to check the port is closed). The
#     package's own ssh service is not started by this script (see below);
#   - kcat (librdkafka's command-line client): the Kafka listener's tests produce and
#     consume with it (tests/server/test_kafka_listener.py).
set -euo pipefail

missing=()
if ! dpkg -s zookeeper >/dev/null 2>&1 || [ ! -f /usr/share/java/zookeeper.jar ]; then
    missing+=(zookeeper)
fi
if ! command -v javac >/dev/null 2>&1; then
    # a JDK (javac): the tests build the Spark JVM reader's jar (sparklog spark-jar);
    # it brings the Java runtime too
    missing+=(default-jdk-headless)
fi
if ! command -v mvn >/dev/null 2>&1; then
    missing+=(maven)
fi

[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v nc >/dev/null 2>&1 || missing+=(netcat-openbsd)
command -v fuser >/dev/null 2>&1 || missing+=(psmisc)
command -v kcat >/dev/null 2>&1 || missing+=(kcat)

if [ ${#missing[@]} -eq 0 ]; then
    echo "[sparklog] system test dependencies present (zookeeper, java, javac, mvn, sshd," \
         "nc, fuser, kcat)"
    exit 0
fi

if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "[sparklog] missing system packages: ${missing[*]} (not root or no apt-get:" \
         "install them to run the ZooKeeper, Spark and HDFS tests)" >&2
    exit 1
fi

echo "[sparklog] installing system packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# the lab starts sshd only inside its own network namespaces: keep the package from
# starting the machine's ssh service (a policy-rc.d refusing every start, only while
# installing and only when the machine has none; containers usually have one)
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "[sparklog] installed: ${missing[*]}"
