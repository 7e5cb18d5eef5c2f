"""``mggcn datasets``: the datasets that ``mggcn train NAME`` and ``mggcn prepare NAME DIR`` download by name."""

from __future__ import annotations

import argparse
import os
import sys

HELP = "the datasets known by name, their sizes and whether they are cached"
DESCRIPTION = """The datasets that `mggcn train NAME`, `mggcn prepare NAME DIR`, `mggcn info NAME` and
mggcn.train("NAME") take by name: where they come from, the download, their size as the source's own loader reports
it, and how much of each the cache holds. The first use downloads the files into the cache ($MGGCN_DATA, else
~/.cache/mggcn), checks and prepares them; later runs read the prepared directory. $MGGCN_DATA_URL replaces every
source by a mirror (NAME/FILE under it).

example:
  mggcn datasets
"""

_COLUMNS = ("name", "vertices", "edges", "features", "classes", "download", "cached", "source")


def add_arguments(p: argparse.ArgumentParser) -> None:
    del p  # no options


def rows() -> list[tuple[str, ...]]:
    """One row of :data:`_COLUMNS` per dataset of the catalog."""
    from mggcn.data.catalog import CATALOG
    from mggcn.data.datasets import cached_state
    from mggcn.utils.units import format_bytes

    table = []
    for entry in CATALOG.values():
        size = "?" if entry.download is None else format_bytes(entry.download)
        table.append((entry.name, *(f"{v:,}" for v in entry.stats), size, cached_state(entry), entry.source))
    return table


def run(args: argparse.Namespace) -> int:
    from mggcn.data.catalog import CACHE_ENV, cache_dir

    table = [_COLUMNS, *rows()]
    widths = [max(len(row[i]) for row in table) for i in range(len(_COLUMNS))]
    for row in table:
        cells = [cell.ljust(w) if i in (0, 6, 7) else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        print("  ".join(cells).rstrip())
    cache = cache_dir()
    source = f"from {CACHE_ENV}" if os.environ.get(CACHE_ENV, "").strip() else f"the default; {CACHE_ENV} sets another"
    print(f"cache: {cache} ({source}); archive sizes are approximate, ? = not published")
    if cache.exists() and not cache.is_dir():  # a download or prepare by name would fail there
        print(f"mggcn datasets: warning: the cache {cache} is not a directory; set {CACHE_ENV} to one",
              file=sys.stderr)
    return 0
