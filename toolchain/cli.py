"""The ``kiln`` command line.

Each subcommand lives in its own module under :mod:`toolchain.commands` and provides
``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``.  Modules are
imported lazily so ``kiln --help`` stays fast and one broken command cannot break another.

Exit status: 0 on success, 2 for a user error (:class:`toolchain.errors.KilnError`, a bad
option), 1 only for a bug in Kiln (the CLI says so and prints :func:`bug_report`'s facts).
``--debug`` shows the traceback of any error.  Kiln's warnings (:class:`KilnWarning`) are
printed as ``kiln: warning: ...`` lines.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
import warnings
from collections.abc import Sequence

from toolchain import __version__
from toolchain.errors import KilnError, KilnWarning

#: subcommand name -> module under toolchain.commands
COMMANDS: dict[str, str] = {
    "inspect": "inspect_cmd",
    "compile": "compile_cmd",
    "run": "run_cmd",
    "flash": "flash_cmd",
    "quantize": "quantize_cmd",
    "sim": "sim_cmd",
    "cache": "cache_cmd",
    "tune": "tune_cmd",
}


def _load(name: str):
    return importlib.import_module(f"toolchain.commands.{COMMANDS[name]}")


def build_parser() -> argparse.ArgumentParser:
    """Build the full argument parser (every subcommand registered)."""
    parser = argparse.ArgumentParser(
        prog="kiln",
        description="Kiln: compile ONNX models into self-contained C bundles.",
    )
    parser.add_argument("--version", action="version", version=f"kiln {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show full tracebacks for errors"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = _load(name)
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show full tracebacks for errors")
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kiln`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_module", None) is None:
        parser.print_help()
        return 2
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", KilnWarning)
            warnings.showwarning = _show_warning
            return int(args._module.run(args) or 0)
    except KilnError as exc:
        if args.debug or exc.exit_code == 1:
            traceback.print_exc()
        print(f"kiln {args.command}: error: {exc}", file=sys.stderr)
        if exc.exit_code == 1:
            print(bug_report(argv), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("kiln: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`kiln inspect m.onnx | head`): not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as exc:  # a bug in Kiln, not in the user's input
        traceback.print_exc()
        print(f"kiln {args.command}: internal error: {type(exc).__name__}: "
              f"{str(exc).splitlines()[0] if str(exc) else ''}", file=sys.stderr)
        print(bug_report(argv), file=sys.stderr)
        return 1


def bug_report(argv: Sequence[str]) -> str:
    """What to say after an error that is Kiln's fault: that it is, and the facts a report
    needs (the command, the versions of Kiln, Python, the platform and the libraries)."""
    import platform
    from importlib import metadata

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    libs = ", ".join(f"{d} {version(d)}" for d in ("numpy", "onnx", "onnxruntime", "llvmlite"))
    return ("This is a Kiln bug, not a problem with your input. Please report it with the "
            "traceback above, the model, and these facts:\n"
            f"  command: kiln {' '.join(argv)}\n"
            f"  kiln {__version__}, Python {platform.python_version()}, "
            f"{platform.platform()}\n  {libs}")


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Kiln's warnings as one ``kiln: warning:`` line on stderr (others as usual)."""
    if issubclass(category, KilnWarning):
        print(f"kiln: warning: {message}", file=sys.stderr)
    else:
        _SHOW_WARNING(message, category, filename, lineno, file, line)


_SHOW_WARNING = warnings.showwarning

if __name__ == "__main__":
    sys.exit(main())
