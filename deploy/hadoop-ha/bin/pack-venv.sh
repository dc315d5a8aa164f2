#!/usr/bin/env bash
# Pack sparklog and its dependencies into a relocatable venv archive for YARN.
#
# Usage: pack-venv.sh [--python PY] [--source SPEC] [--extras LIST] [--output FILE]
#                     [--upload HDFS_URL] [--pip-args "ARGS"] [--keep-pyspark]
#                     [--cache DIR]
#   --python   interpreter the venv is made from (default python3). The archive holds
#              the venv, not the interpreter: the same Python (same path, same version)
#              must be installed on every NodeManager host.
#   --source   a sparklog source tree (default: this repository), a wheel file or a
#              requirement such as "sparklog[spark,hdfs,cluster]==X.Y"
#   --extras   extras installed with a source tree (default spark,hdfs,cluster)
#   --output   archive to write (default sparklog-venv.tar.gz)
#   --upload   also copy it to HDFS, e.g. hdfs://ns1/apps/sparklog/sparklog-venv.tar.gz
#              (the spark.archives of sparklog/spark-defaults.conf), and beside it
#              spark-jars.zip, the jars of the pyspark of --python (spark.yarn.archive):
#              readable by all, so NodeManagers localize both once, not per application
#   --pip-args extra pip arguments (e.g. "--no-index --find-links wheels/")
#   --keep-pyspark  keep pyspark in the archive. By default it is removed (about 500 MB
#              of the archive): spark-submit ships its own pyspark.zip and py4j to every
#              YARN container, first on PYTHONPATH, so a packed pyspark is never imported
#              there and the containers always run the submitting Spark's Python side.
#   --cache    keep each archive (and spark-jars.zip) in DIR under a hash of what it is
#              made of (the source's files, --python's interpreter and version, --extras,
#              --pip-args, --keep-pyspark; for spark-jars.zip the jars' names and sizes)
#              and reuse it when the hash is there already: a rerun with nothing changed
#              packs nothing. Dependencies resolved from an index are not part of the
#              hash (pin them in --source or clear DIR to pick up new releases).
#
# sparklog installs the module pyspark_sparklog beside its package, through which Spark
# registers format("sparklog") by itself. Containers unpack the archive as ./venv and
# run ./venv/bin/python (spark.archives ...#venv).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
DEPLOY="$(dirname "$HERE")"
REPO="$(cd "$DEPLOY/../.." && pwd)"
PYTHON=python3
SOURCE="$REPO"
EXTRAS="spark,hdfs,cluster"
OUTPUT=sparklog-venv.tar.gz
UPLOAD=""
PIP_ARGS=""
KEEP_PYSPARK=0
CACHE=""
while [ $# -gt 0 ]; do
    case "$1" in
        --python) PYTHON="$2"; shift ;;
        --source) SOURCE="$2"; shift ;;
        --extras) EXTRAS="$2"; shift ;;
        --output) OUTPUT="$2"; shift ;;
        --upload) UPLOAD="$2"; shift ;;
        --pip-args) PIP_ARGS="$2"; shift ;;
        --keep-pyspark) KEEP_PYSPARK=1 ;;
        --cache) CACHE="$2"; shift ;;
        -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
        *) echo "pack-venv.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
VENV="$WORK/venv"

# the source is copied first: its files are part of the cache key
if [ -d "$SOURCE" ]; then
    # build from a copy of what the package is made of (pyproject.toml's metadata and
    # modules), of the files git does not ignore: pip leaves its build/ there, no local
    # venv, test or doc of the tree is copied, and a change to those keeps the cache key
    mkdir "$WORK/src"
    BUILD_FILES=(pyproject.toml setup.py setup.cfg README.md LICENSE pyspark_sparklog.py sparklog)
    PRESENT=()
    for f in "${BUILD_FILES[@]}"; do [ -e "$SOURCE/$f" ] && PRESENT+=("$f"); done
    if git -C "$SOURCE" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        (cd "$SOURCE" && git ls-files -z --cached --others --exclude-standard -- "${PRESENT[@]}" |
            tar --null --ignore-failed-read -T - -cf -) | tar -C "$WORK/src" -xf -
    else
        tar -C "$SOURCE" --exclude=__pycache__ --exclude='*.egg-info' -cf - "${PRESENT[@]}" |
            tar -C "$WORK/src" -xf -
    fi
    SOURCE_HASH="$(cd "$WORK/src" && find . -type f -print0 | LC_ALL=C sort -z |
        xargs -0 sha256sum | sha256sum | cut -c1-64)"
    SOURCE="$WORK/src[$EXTRAS]"
elif [ -f "$SOURCE" ]; then
    SOURCE_HASH="$(sha256sum < "$SOURCE" | cut -c1-64)"
else
    SOURCE_HASH="$SOURCE"
fi
# the interpreter the archive's venv points to (a venv's python resolves to its base),
# not the path it was called by: two checkouts' venvs share their archives
PY_ID="$("$PYTHON" -c 'import os, sys; print(os.path.realpath(sys.executable), sys.version)')"
KEY="$(printf '%s\n' "$SOURCE_HASH" "$PY_ID" "$EXTRAS" "$PIP_ARGS" "$KEEP_PYSPARK" |
    sha256sum | cut -c1-16)"
CACHED=""
if [ -n "$CACHE" ]; then
    mkdir -p "$CACHE"
    CACHED="$CACHE/sparklog-venv-$KEY.tar.gz"
fi
if [ -n "$CACHED" ] && [ -f "$CACHED" ]; then
    cp "$CACHED" "$OUTPUT"
    echo "pack-venv: $OUTPUT from the cache ($CACHED): same source, Python and options"
else
    echo "pack-venv: creating a venv with $PYTHON"
    "$PYTHON" -m venv "$VENV"
    echo "pack-venv: installing $SOURCE"
    # shellcheck disable=SC2086  # PIP_ARGS is a list of words
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check $PIP_ARGS "$SOURCE"

    if [ "$KEEP_PYSPARK" = 0 ] && "$VENV/bin/python" -m pip show --quiet pyspark >/dev/null 2>&1; then
        "$VENV/bin/python" -m pip uninstall --quiet --yes pyspark
        echo "pack-venv: pyspark left out (spark-submit ships its own to the containers)"
    fi

    # the archive must work from any directory: check imports from the venv itself
    "$VENV/bin/python" -I - <<'PY'
import importlib.util
import sparklog
assert importlib.util.find_spec("pyspark_sparklog"), \
    "pyspark_sparklog is not importable (a sparklog release older than this tree?)"
print(f"pack-venv: sparklog {sparklog.__version__} importable")
PY

    # bin/python is a symlink to the base interpreter: say which one the nodes need
    BASE="$(readlink -f "$VENV/bin/python")"
    VERSION="$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    # gzip's fastest level: the archive is localized once per NodeManager, and the
    # default level took most of a minute more on a loaded 2-core machine
    tar -C "$VENV" -cf - . | gzip -1 > "$OUTPUT"
    echo "pack-venv: wrote $OUTPUT ($(du -h "$OUTPUT" | cut -f1)); NodeManagers need Python $VERSION at $BASE"
    if [ -n "$CACHED" ]; then  # a complete file or none: write aside, then rename
        cp "$OUTPUT" "$CACHED.$$" && mv "$CACHED.$$" "$CACHED"
    fi
fi

if [ -n "$UPLOAD" ]; then
    JARS="$("$PYTHON" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
    JARS_ZIP="$WORK/spark-jars.zip"
    JARS_KEY="$(cd "$JARS" && find . -type f -printf '%p %s\n' | LC_ALL=C sort | sha256sum | cut -c1-16)"
    if [ -n "$CACHE" ] && [ -f "$CACHE/spark-jars-$JARS_KEY.zip" ]; then
        JARS_ZIP="$CACHE/spark-jars-$JARS_KEY.zip"
    else
        (cd "$JARS" && zip -q -0 -r "$JARS_ZIP" .)
        if [ -n "$CACHE" ]; then
            cp "$JARS_ZIP" "$CACHE/spark-jars-$JARS_KEY.zip.$$" &&
                mv "$CACHE/spark-jars-$JARS_KEY.zip.$$" "$CACHE/spark-jars-$JARS_KEY.zip"
        fi
    fi
    hdfs dfs -mkdir -p "$(dirname "$UPLOAD")"
    hdfs dfs -put -f "$OUTPUT" "$UPLOAD"
    hdfs dfs -put -f "$JARS_ZIP" "$(dirname "$UPLOAD")/spark-jars.zip"
    hdfs dfs -chmod 644 "$UPLOAD" "$(dirname "$UPLOAD")/spark-jars.zip"
    echo "pack-venv: uploaded to $UPLOAD and $(dirname "$UPLOAD")/spark-jars.zip"
fi
