#!/usr/bin/env bash
# Beyond CI: runs librdkafka's and franz-go's own test suites (pinned versions) against a
# local sparklog broker with a Kafka listener, the tests listed in scripts/kafka-suites/,
# and prints a pass/fail table (docs/kafka-protocol.md, "librdkafka's and franz-go's test
# suites"). Needs crates.io and the Go module proxy (downloads are cached
# outside the repository), a C/C++ toolchain with make, OpenSSL, zlib and zstd headers,
# and Go.
#
#   scripts/kafka-suites.sh                      # both suites, the allowlisted tests
#   scripts/kafka-suites.sh --suite franz-go     # one suite
#   scripts/kafka-suites.sh --only 0017_compression --suite librdkafka   # triage
#   scripts/kafka-suites.sh --all                # every broker test, allowlisted or not
#   scripts/kafka-suites.sh --list               # the tests and which are allowlisted
#   scripts/kafka-suites.sh --skip "no Go here"  # prints "skipped: no Go here", exit 0
source "$(dirname "$0")/env.sh" test
exec .venv/bin/python scripts/kafka_suites.py "$@"
