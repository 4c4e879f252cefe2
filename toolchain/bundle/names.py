"""C names and comment text for a bundle: everything from the model is sanitised here.

Model names (tensor, node and model names from ONNX) may hold quotes, backslashes, ``*/``,
newlines, non-ASCII letters, C keywords or a leading digit.  Nothing from the model reaches
the generated C except through :class:`CNames` (identifiers) and :func:`comment` (text
inside ``/* ... */``).

Example::

    >>> names = CNames()
    >>> names('conv"1*/'), names("int"), names("9lives"), names('conv"1*/')
    ('conv_1__', 'v_int', '_9lives', 'conv_1___1')
    >>> comment("a */ b\\nc ??/")
    'a __ b_c ___'
"""

from __future__ import annotations

import hashlib
import re

from toolchain.codegen.cstyle import sanitize

#: longest identifier part taken from a model name (C99 promises 63 significant characters
#: for internal names; a hash keeps long names apart)
MAX_NAME = 40

_COMMENT_OK = re.compile(r"[^A-Za-z0-9_.:,;=+()\[\]{}<>@#%&|~^ -]")


def c_identifier(name: str, limit: int = MAX_NAME) -> str:
    """A valid C identifier for ``name`` (not yet unique): ``"a.b-c"`` -> ``"a_b_c"``."""
    s = sanitize(name)
    if len(s) > limit:
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        s = f"{s[:limit - 9]}_{digest}"
    return s


class CNames:
    """Hands out unique C identifiers in order of request (deterministic).

    Asking twice for the same name gives two different identifiers (``x``, ``x_1``): every
    request is a new object.  ``reserved`` names are never handed out.
    """

    def __init__(self, reserved: tuple[str, ...] | set[str] = ()) -> None:
        self.used: set[str] = set(reserved)

    def __call__(self, name: str, prefix: str = "") -> str:
        base = prefix + c_identifier(name)
        out, n = base, 0
        while out in self.used:
            n += 1
            out = f"{base}_{n}"
        self.used.add(out)
        return out


def comment(text: str, limit: int = 120) -> str:
    """``text`` made safe inside a C block comment: one line, no ``*/``, no trigraphs."""
    s = _COMMENT_OK.sub("_", str(text))
    return s if len(s) <= limit else s[:limit - 3] + "..."


def model_identifier(name: str) -> str:
    """The C prefix of a model (``resnet8`` -> ``resnet8``; ``My Net-2`` -> ``my_net_2``)."""
    return c_identifier(name.lower(), limit=32)
