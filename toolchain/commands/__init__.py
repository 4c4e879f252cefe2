"""Subcommands of the ``kiln`` CLI, one module each (see :mod:`toolchain.cli`)."""
