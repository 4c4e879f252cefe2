"""The compile's progress bar (``kiln compile``'s stages, on stderr)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any


class CompileProgress:
    """One tqdm bar on stderr for a whole compile, naming its stage: ``import``,
    ``passes``, ``scheduling`` (with kernels done / total), ``rendering``, ``writing``.
    Shown only after 2 s, on a terminal (``enabled=None``) or when asked (``True``);
    ``False`` (``--no-progress``, the Python API) never.

    >>> bar = CompileProgress(False)
    >>> bar.stage("import"); bar.stage("passes"); bar.close()
    >>> bar.done
    ['import', 'passes']
    """

    STAGES = ("import", "passes", "scheduling", "rendering", "writing")

    def __init__(self, enabled: bool | None = None) -> None:
        from tqdm import tqdm

        on = sys.stderr.isatty() if enabled is None else enabled
        self.done: list[str] = []
        self.bar = tqdm(total=len(self.STAGES), desc="kiln compile", unit="stage",
                        delay=2.0, disable=not on, file=sys.stderr, leave=False,
                        bar_format="{desc} {bar} [{elapsed}] {postfix}")

    @classmethod
    def of(cls, progress: bool | None | CompileProgress) -> CompileProgress:
        """``progress`` itself, or a new bar for a ``progress`` flag."""
        return progress if isinstance(progress, CompileProgress) else cls(progress)

    def stage(self, name: str) -> None:
        """Start stage ``name`` (the previous one is done)."""
        if self.done:
            self.bar.update(1)
        self.done.append(name)
        self.bar.set_description_str(f"kiln compile: {name}", refresh=False)
        self.bar.set_postfix_str("")

    def kernels(self, items: list[Any]) -> Iterator[Any]:
        """``items``, counting them in the bar's postfix."""
        for i, item in enumerate(items):
            self.bar.set_postfix_str(f"{i}/{len(items)} kernels", refresh=i % 8 == 0)
            yield item

    def close(self) -> None:
        self.bar.close()
