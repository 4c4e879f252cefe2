"""Every ``kiln ...`` command line in README.md, docs/*.md, hw/*.md and the commands'
``--help`` examples names a command, options, choices, targets and boards that exist.

A doc that tells a user to run ``kiln run --emulate`` (no such option: ``--emulate`` is
``kiln compile``'s) sends them to an argparse error; this reads each command line out of
the docs (shell blocks, and inline code in the text) and holds it against the CLI's own
parser, without running anything.
"""

from __future__ import annotations

import argparse
import importlib
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from toolchain.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parent.parent
#: a command starts a shell line or inline code span (after a ``$`` prompt or ``(``), or
#: follows ``&&``, ``||`` or ``;``
_COMMAND = re.compile(r"^\s*(?:\$\s+)?\(?(?:kiln|python -m toolchain) ([a-z][\w-]*)(.*)")
_OPTION = re.compile(r"^(--?[A-Za-z][\w-]*)(?:=(\S+))?$")
#: options whose value names a file under a folder of the repository
_NAMED = {"--target": ("targets", ".yaml"), "--board": ("boards", ".yaml")}


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return dict(action.choices)


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of each shell-block line and inline code span."""
    fence = False
    for no, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
        elif fence:
            yield no, line
        else:
            for span in re.findall(r"`([^`]+)`", line):
                yield no, span


def _sources() -> Iterator[tuple[str, str]]:
    for path in [ROOT / "README.md", *sorted(ROOT.glob("docs/*.md")),
                 *sorted(ROOT.glob("hw/*.md"))]:
        yield str(path.relative_to(ROOT)), path.read_text()
    for name, module in COMMANDS.items():  # the examples of `kiln NAME --help`
        epilog = getattr(importlib.import_module(f"toolchain.commands.{module}"), "EPILOG", "")
        yield f"kiln {name} --help", "```\n" + epilog + "\n```"


def _end(toks: list[str]) -> int:
    """Where the command in ``toks`` ends: at a comment, a redirection or a pipe into
    another program (``--a | --b`` lists alternatives and goes on)."""
    for i, t in enumerate(toks):
        if t.startswith(("#", ">", "2>")):
            return i
        if t == "|" and not (i + 1 < len(toks) and toks[i + 1].lstrip("[").startswith("-")):
            return i
    return len(toks)


def command_lines(sources: Iterable[tuple[str, str]] | None = None
                  ) -> list[tuple[str, str, list[str]]]:
    """``(where, command, tokens)`` of every kiln command line in ``sources`` (``(name,
    text)`` pairs; default: README.md, docs/*.md, hw/*.md and the commands' ``--help`` examples)."""
    out = []
    for name, text in _sources() if sources is None else sources:
        for no, line in _lines(text):
            for m in filter(None, map(_COMMAND.match, re.split(r"&&|\|\||;", line))):
                toks = m.group(2).split()
                toks = [t.strip("[](),.`'\"") for t in toks[:_end(toks)]]
                out.append((f"{name}:{no}", m.group(1), toks))
    return out


def problems(lines: list[tuple[str, str, list[str]]]) -> list[str]:
    """What in ``lines`` the parser does not have: a command, an option, a choice, a target
    or board."""
    subs = _subparsers()
    bad = []
    for where, command, toks in lines:
        if command not in subs:
            bad.append(f"{where}: kiln has no command {command!r}")
            continue
        options = subs[command]._option_string_actions
        for i, tok in enumerate(toks):
            m = _OPTION.match(tok)
            if not m:
                continue
            if m.group(1) not in options:
                bad.append(f"{where}: kiln {command} has no option {m.group(1)}")
                continue
            action = options[m.group(1)]
            value = m.group(2) or (toks[i + 1] if i + 1 < len(toks) and action.nargs != 0
                                   else None)
            if not value or not re.fullmatch(r"[a-z0-9][\w-]*", value):
                continue  # a placeholder (NAME, T, ...), a path (my-vta.yaml) or none
            if action.choices and value not in action.choices:
                bad.append(f"{where}: kiln {command} {m.group(1)} {value}: not one of "
                           f"{', '.join(map(str, action.choices))}")
            folder = _NAMED.get(m.group(1))
            if folder and not (ROOT / folder[0] / (value + folder[1])).exists():
                bad.append(f"{where}: kiln {command} {m.group(1)} {value}: there is no "
                           f"{folder[0]}/{value}{folder[1]}")
    return bad


def test_every_kiln_command_line_in_the_docs_parses() -> None:
    lines = command_lines()
    assert len(lines) > 250  # README, docs/ and the --help examples (the reader works)
    assert {c for _, c, _ in lines} >= set(COMMANDS)
    assert problems(lines) == []


@pytest.mark.parametrize("text, found", [
    ("`kiln run build/m --emulate`", "kiln run has no option --emulate"),
    ("```sh\nkiln compile m.onnx --target cuda-sm91 -o b   # x --nothing\n```",
     "kiln compile --target cuda-sm91: there is no targets/cuda-sm91.yaml"),
    ("```\n$ kiln tune m.onnx --runner=gpu\n```", "--runner gpu: not one of local, qemu"),
    ("`kiln simulate prog.bin`", "kiln has no command 'simulate'"),
    ("`kiln sim p.bin --disasm | --check | --rtlx`", "kiln sim has no option --rtlx"),
])
def test_the_reader_finds_a_bad_command_line(text: str, found: str) -> None:
    (bad,) = problems(command_lines([("x.md", text)]))
    assert found in bad, bad


def test_the_reader_keeps_what_is_no_command() -> None:
    text = ("```\n| kiln us | ort us |\nkiln inspect m.onnx | head -3 && kiln run m.onnx "
            "--outputs o.npz > log\n```\nsay `kiln: warning:` and `kiln {args.command}`")
    lines = command_lines([("y.md", text)])
    assert [(w, c, toks) for w, c, toks in lines] == [
        ("y.md:3", "inspect", ["m.onnx"]), ("y.md:3", "run", ["m.onnx", "--outputs", "o.npz"])]
    assert problems(lines) == []
