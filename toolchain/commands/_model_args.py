"""Command-line arguments shared by every command that reads a model.

``MODEL`` (a path) and ``--input-shape NAME=D0,D1,...`` (repeatable), and
:func:`load_graph` which imports the model with them::

    def add_arguments(parser):
        add_model_arguments(parser)

    def run(args):
        graph = load_graph(args)
"""

from __future__ import annotations

import argparse

from toolchain.errors import OptionError
from toolchain.graph.ir import Graph


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``"x=1,3,224,224"`` -> ``("x", (1, 3, 224, 224))``; ``"s="`` is a scalar.

    Example::

        >>> parse_input_shape("input.1=1,3,8,8")
        ('input.1', (1, 3, 8, 8))
    """
    name, sep, dims = text.rpartition("=")
    if not sep or not name:
        raise OptionError(f"--input-shape {text!r}: expected NAME=D0,D1,... "
                          "(e.g. --input-shape input=1,3,224,224)")
    try:
        shape = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
    except ValueError:
        raise OptionError(f"--input-shape {text!r}: dimensions must be integers separated "
                          "by commas (e.g. input=1,3,224,224)") from None
    if any(d < 1 for d in shape):
        raise OptionError(f"--input-shape {text!r}: dimensions must be positive integers")
    return name, shape


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``MODEL`` and ``--input-shape`` to ``parser``."""
    parser.add_argument("model", metavar="MODEL.onnx", help="the ONNX model file")
    parser.add_argument(
        "--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
        help="give a static shape to a model input with dynamic dimensions "
             "(repeat for several inputs), e.g. --input-shape input=1,3,224,224",
    )


def input_shapes(args: argparse.Namespace) -> dict[str, tuple[int, ...]]:
    """The ``--input-shape`` options as a dict (a name given twice is an error)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for text in args.input_shape:
        name, shape = parse_input_shape(text)
        if name in shapes:
            raise OptionError(f"--input-shape {name}=... is given twice")
        shapes[name] = shape
    return shapes


def load_graph(args: argparse.Namespace) -> Graph:
    """Import ``args.model`` with ``args.input_shape`` applied."""
    from toolchain.frontend.onnx import from_onnx

    return from_onnx(args.model, input_shapes=input_shapes(args))
