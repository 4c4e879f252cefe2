"""The CLI skeleton: help, version, exit statuses."""

from __future__ import annotations

import subprocess
import sys

from toolchain import __version__
from toolchain.cli import main


def test_version(capsys):
    try:
        main(["--version"])
    except SystemExit as exc:
        assert exc.code == 0
    assert __version__ in capsys.readouterr().out


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "usage: kiln" in capsys.readouterr().out


def test_unknown_command_is_a_usage_error():
    proc = subprocess.run([sys.executable, "-m", "toolchain", "frobnicate"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "invalid choice" in proc.stderr


def test_closed_pipe_is_not_a_bug():
    proc = subprocess.run(
        f"{sys.executable} -m toolchain inspect examples/lenet5.onnx --json | head -c 10",
        shell=True, capture_output=True, text=True,
    )
    assert "internal error" not in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_unexpected_exception_is_reported_as_a_kiln_bug(monkeypatch, capsys):
    """Exit 1 (never 2, "your input is wrong") with the facts a report needs."""
    from toolchain.commands import inspect_cmd

    def boom(args):
        raise KeyError("oops")

    monkeypatch.setattr(inspect_cmd, "run", boom)
    assert main(["inspect", "examples/lenet5.onnx"]) == 1
    err = capsys.readouterr().err
    assert "internal error: KeyError" in err
    assert "This is a Kiln bug" in err
    assert "command: kiln inspect examples/lenet5.onnx" in err and __version__ in err


def test_generated_code_that_does_not_compile_is_a_kiln_bug(monkeypatch, capsys):
    from toolchain.commands import inspect_cmd
    from toolchain.errors import BuildError, GeneratedCodeError

    def boom(args):
        raise GeneratedCodeError("compiling generated C failed (exit 1).\nkernels.c: error")

    monkeypatch.setattr(inspect_cmd, "run", boom)
    assert issubclass(GeneratedCodeError, BuildError)
    assert main(["inspect", "examples/lenet5.onnx"]) == 1
    err = capsys.readouterr().err
    assert "error: compiling generated C failed" in err and "This is a Kiln bug" in err


def test_kiln_warnings_are_one_line(monkeypatch, capsys):
    import warnings

    from toolchain.commands import inspect_cmd
    from toolchain.errors import KilnWarning

    def warn(args):
        warnings.warn(KilnWarning("model m: something to know"), stacklevel=1)
        return 0

    monkeypatch.setattr(inspect_cmd, "run", warn)
    assert main(["inspect", "examples/lenet5.onnx"]) == 0
    assert capsys.readouterr().err == "kiln: warning: model m: something to know\n"
