#!/usr/bin/env bash
# The main job: creates .venv, installs sparklog, and runs the quickstart on an embedded
# local storage root (./quickstart-data by default). Extra arguments go to
# `sparklog quickstart`, e.g. `bash scripts/quickstart.sh --records 100000`.
source "$(dirname "$0")/env.sh" all
exec .venv/bin/sparklog quickstart "$@"
