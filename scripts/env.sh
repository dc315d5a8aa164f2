# Sourced by the scripts in this directory: creates the project's virtual environment
# (.venv) on first use and installs the project with the given extras into it.
# Needs Python 3.10+ (python3, or $PYTHON) and, for Spark, Java 17+.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
EXTRAS=${1:-all}
if [ ! -x .venv/bin/python ]; then
    echo "[sparklog] creating .venv with $($PYTHON --version 2>&1)"
    "$PYTHON" -m venv .venv
fi
stamp=".venv/.installed-$EXTRAS"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "[sparklog] installing sparklog[$EXTRAS] into .venv (first run takes a minute)"
    .venv/bin/python -m pip install --disable-pip-version-check -q -e ".[$EXTRAS]"
    touch "$stamp"
fi
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
export PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
