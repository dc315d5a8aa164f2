#!/usr/bin/env bash
# The guardrails run before the tests (.ci/run), each naming what it checks; the first
# that fails stops the run:
#   - ruff: pyflakes' rules and import order (pyproject.toml [tool.ruff]);
#   - import-linter: the layers of the design, the read and write paths independent, no
#     import cycle (pyproject.toml [tool.importlinter]);
#   - mypy: the types of the packages pyproject.toml [tool.mypy] lists;
#   - javac: the JVM reader's Java sources with every warning an error
#     (sparklog.spark.jvm.STRICT_OPTIONS).
# Installs the tools into .venv (the `lint` extra) beside the `test` one.
source "$(dirname "$0")/env.sh" test
source scripts/env.sh lint
if [ -f scripts/ci-deps.sh ]; then
    bash scripts/ci-deps.sh || echo "[sparklog] warning: system test dependencies not installed"
fi

step() { echo "[sparklog] check: $*"; }

step "ruff (pyflakes, import order)"
.venv/bin/ruff check --quiet .
step "import-linter (layers, read/write independence, no cycles)"
.venv/bin/lint-imports --no-cache
step "mypy (the packages [tool.mypy] lists)"
.venv/bin/mypy
step "javac -Xlint -Werror (JVM reader)"
.venv/bin/python - <<'PY'
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sparklog.spark.jvm import javac_command, pyspark_jars

javac, jars = shutil.which("javac"), pyspark_jars()
if javac is None or jars is None:
    sys.exit("javac check: " + ("no javac on PATH (a JDK 17+ is needed)" if javac is None
                                else "pyspark is not installed"))
with tempfile.TemporaryDirectory(prefix="sparklog-javac-") as classes:
    sys.exit(subprocess.run(javac_command(javac, jars, Path(classes), strict=True)).returncode)
PY
echo "[sparklog] check: all passed"
