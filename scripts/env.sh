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
# PySpark's launchers (.venv/bin/spark-submit, pyspark...) find SPARK_HOME and pick the
# Python of the driver and workers with "python3" from PATH unless PYSPARK_PYTHON is
# set: without an activated venv that is the system's Python, which has no pyspark nor
# sparklog ("find_spec('pyspark') is None", "/bin/spark-class: No such file"). Every
# launcher sources find-spark-home first, so it gets this venv's Python there.
hook='# sparklog (scripts/env.sh): the Python of this venv unless PYSPARK_PYTHON is set'
launcher=.venv/bin/find-spark-home
if [ -f "$launcher" ] && ! grep -qF "$hook" "$launcher"; then
    {
        head -n 1 "$launcher"
        echo "$hook"
        echo 'if [ -z "${PYSPARK_PYTHON:-}" ] && [ -x "$(dirname "$0")/python" ]; then'
        echo '  export PYSPARK_PYTHON="$(cd "$(dirname "$0")"; pwd)/python"'
        echo 'fi'
        tail -n +2 "$launcher"
    } > "$launcher.sparklog" && mv "$launcher.sparklog" "$launcher"
fi
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
export PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
