"""Markdown tables for docs/benchmarks.md from `mggcn bench --out` reports, each headed by when, on what and by which
command it was measured (the report records them).

    python scripts/bench_table.py REPORT.json [REPORT.json ...] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys

from mggcn.tools.bench.table import format_markdown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", help="JSON reports written by mggcn bench --out")
    parser.add_argument("--out", help="write the tables there as well")
    args = parser.parse_args(argv)
    tables = []
    for path in args.reports:
        try:
            with open(path) as f:
                report = json.load(f)
            if not isinstance(report, dict) or not isinstance(report.get("rows"), list):
                raise TypeError("no list of rows")  # other JSON, e.g. a list or null
            tables.append(format_markdown(report))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            print(f"bench_table: {path}: not a report of mggcn bench ({type(err).__name__}: {err})", file=sys.stderr)
            return 2
    text = "\n\n".join(tables)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
