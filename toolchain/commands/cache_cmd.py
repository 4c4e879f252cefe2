"""``kiln cache info|clear``: the build cache (compiled kernels and bundles for this host)."""

from __future__ import annotations

import argparse

HELP = "show or empty the build cache (compiled kernels and bundles for this host)"

EPILOG = """\
examples:
  kiln cache info      # where it is, how many files, how big, the limits
  kiln cache clear     # remove every entry (they are rebuilt when needed)

The cache keeps at most $KILN_CACHE_MAX_MB megabytes (default 512) and drops entries
unused for $KILN_CACHE_MAX_DAYS days (default 30); $KILN_CACHE_DIR moves it
(default ~/.cache/kiln).
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("action", choices=("info", "clear"), help="what to do")


def run(args: argparse.Namespace) -> int:
    from toolchain.runtime import cache

    if args.action == "clear":
        files, size = cache.clear()
        print(f"removed {files:,} files ({size / 2**20:.1f} MiB) from {cache.cache_dir()}")
        return 0
    i = cache.info()
    print(f"{i['path']}: {i['files']:,} files, {i['bytes'] / 2**20:.1f} MiB "
          f"(limits: {i['max_bytes'] / 2**20:.0f} MiB, entries unused for "
          f"{i['max_days']:g} days are removed)")
    return 0
