"""``sparklog classpath NAME``: print the class path of a set of Java artifacts.

    java -cp "$(sparklog classpath hadoop)" org.apache.hadoop.hdfs.server.namenode.NameNode
    spark-submit --jars "$(sparklog classpath delta --separator ,)" job.py

The artifacts come from Maven Central through ``mvn`` on first use and are cached
(:mod:`sparklog.maven`).
"""

from __future__ import annotations

import os


def add_parser(subparsers) -> None:
    """Register ``classpath``."""
    from ..maven import names

    parser = subparsers.add_parser(
        "classpath", help="print the class path of Java artifacts sparklog uses "
                          "(resolved from Maven on first use)",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("name", choices=names(), help="the set of artifacts")
    parser.add_argument("--separator", default=os.pathsep,
                        help=f"between jars (default {os.pathsep!r}; ',' for --jars)")
    parser.set_defaults(func=run)


def run(args) -> int:
    """Print the class path."""
    from ..maven import classpath

    print(args.separator.join(classpath(args.name)))
    return 0
