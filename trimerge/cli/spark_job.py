"""``spark-submit`` entry point: run a trimerge diff on an existing Spark cluster.

    spark-submit --master spark://HOST:7077 \\
        --conf spark.pyspark.python=/path/to/venv/bin/python \\
        $(python -c 'import trimerge.cli.spark_job as m; print(m.__file__)') \\
        /data/flights-repo main feature -o /data/out/diff.parquet

Executors need pylance and pyarrow (the same versions as the driver); they do not need trimerge
(its reading code is shipped with the job). The repository path must be readable from every
executor (a shared filesystem). Output is written by the executors: Parquet, or a Lance dataset
when the path ends with ``.lance``; one sub-directory per table when several tables changed.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="trimerge-spark-diff", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("repository")
    ap.add_argument("refs", nargs="+", help="A B, A..B or A...B")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--table", action="append", default=None)
    ap.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                    help="object-store option (default: the AWS_*/AZURE_*/GOOGLE_* environment)")
    args = ap.parse_args(argv)

    from trimerge.cli import main as cli_main

    cmd = ["-C", args.repository, *[a for o in args.storage_option for a in ("--storage-option", o)],
           "diff", *args.refs, "--engine", "spark", "-o", args.output]
    for t in args.table or []:
        cmd += ["--table", t]
    cli_main(cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
