#!/usr/bin/env bash
# The whole test suite: creates .venv, installs sparklog[test] and the system packages the
# tests need (Debian's zookeeper, when run as root and missing), then runs pytest.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k storage -x`. The 25 slowest
# tests are listed at the end (--durations), so a CI log shows where the time goes.
source "$(dirname "$0")/env.sh" test
if [ -f scripts/ci-deps.sh ]; then
    bash scripts/ci-deps.sh || echo "[sparklog] warning: system test dependencies not installed; tests needing them will skip and say why"
fi
exec .venv/bin/python -m pytest --durations=25 "$@"
