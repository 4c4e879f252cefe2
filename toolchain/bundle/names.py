"""C names and comment text for a bundle: everything from the model is sanitised here.

Model names (tensor, node and model names from ONNX) may hold quotes, backslashes, ``*/``,
newlines, non-ASCII letters, C keywords or a leading digit.  Nothing from the model reaches
the generated C except through :func:`bundle_namer` (identifiers, made by the one C namer
:class:`~toolchain.codegen.names.Namer`) and :func:`comment` (text inside ``/* ... */``).

Example::

    >>> names = bundle_namer()
    >>> names.fresh('conv"1*/'), names.fresh("int"), names.fresh("9lives"), names.fresh('conv"1*/')
    ('conv_1__', 'v_int', '_9lives', 'conv_1___1')
    >>> comment("a */ b\\nc ??/")
    'a __ b_c ___'
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from toolchain.codegen.names import Namer, sanitize

#: longest identifier part taken from a model name (C99 promises 63 significant characters
#: for internal names; a hash keeps long names apart)
MAX_NAME = 40

_COMMENT_OK = re.compile(r"[^A-Za-z0-9_.:,;=+()\[\]{}<>@#%&|~^ -]")


def bundle_namer(reserved: Iterable[str] = ()) -> Namer:
    """The namer of a bundle's C identifiers, in order of request (deterministic).

    Each :meth:`~toolchain.codegen.names.Namer.fresh` call is a new object: asking twice for
    the same name gives ``x`` and ``x_1``. Names are cut to :data:`MAX_NAME` characters;
    ``reserved`` names are never handed out. Numbered names are not checked against
    :func:`~toolchain.codegen.names.is_reserved` again: the bundle's names reach C as
    struct fields or after a prefix (``w_``, the model's).

    Example::

        >>> names = bundle_namer({"net_run"})
        >>> names.fresh("run", prefix="net_"), names.fresh("a" * 50)
        ('net_run_1', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa_160b4e43')
    """
    return Namer(reserved, limit=MAX_NAME, check_numbered=False)


def comment(text: str, limit: int = 120) -> str:
    """``text`` made safe inside a C block comment: one line, no ``*/``, no trigraphs."""
    s = _COMMENT_OK.sub("_", str(text))
    return s if len(s) <= limit else s[:limit - 3] + "..."


def model_identifier(name: str) -> str:
    """The C prefix of a model (``resnet8`` -> ``resnet8``; ``My Net-2`` -> ``my_net_2``)."""
    return sanitize(name.lower(), limit=32)
