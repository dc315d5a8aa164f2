"""spark-submit entry point of ``sparklog etl run`` (used by ``bin/submit-etl.sh``).

``spark-submit`` needs a Python file as its primary resource; this one passes its
arguments to ``sparklog etl run`` and exits with its status, so a failed run marks the
YARN application FAILED.
"""

import sys

from sparklog.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["etl", "run", *sys.argv[1:]]))
