"""``sparklog spark-jar``: print the path of the JVM reader's jar (building it if needed).

    spark-submit --jars "$(sparklog spark-jar)" job.py

With the jar on Spark's classpath ``spark.read.format("sparklog")`` runs its batch scans
on the JVM (docs/spark.md). Exits with status 1 when the jar cannot be built (no JDK).
"""

from __future__ import annotations

import sys


def add_parser(subparsers) -> None:
    """Register ``spark-jar``."""
    parser = subparsers.add_parser(
        "spark-jar", help="print the path of the Spark JVM reader jar (builds it if needed)",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-build", action="store_true",
                        help="only print the path of an already built jar")
    parser.set_defaults(func=run)


def run(args) -> int:
    """Print the jar's path; status 1 when there is none."""
    from ..spark.jvm import jar_path

    path = jar_path(build=not args.no_build)
    if path is None:
        print("sparklog: error: the JVM reader jar is not available (see the log above; "
              "building it needs javac from a JDK 17+)", file=sys.stderr)
        return 1
    print(path)
    return 0
