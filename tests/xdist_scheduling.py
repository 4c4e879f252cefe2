"""pytest-xdist's ``--dist loadgroup`` scheduler without its two quadratic costs.

The suite runs with ``--dist loadgroup`` (``pyproject.toml``): every test outside an
``xdist_group`` is a work unit of its own, about 10,000 of them. xdist's
:class:`~xdist.scheduler.LoadGroupScheduling` (3.8) keeps every unit it ever handed a
worker in ``assigned_work`` and, each time a test completes, counts the pending tests of
all of them (``_pending_of``, pytest-xdist issue #279); and it finds each test it sends
by ``list.index`` over the whole collection. Both grow with the square of the suite:
for 10,000 trivial tests on two workers the controller took 11-12 CPU s against 5-6
under ``--dist load``, and the run 17 s of wall against 9.5, the workers waiting for
their next test while the controller, a third process on a two-core machine, counted.

:class:`GroupScheduling` is the same scheduler with the bookkeeping made proportional
to the work in flight: a unit leaves ``assigned_work`` when its last test completes (so
the counts walk only the units still running, and a crashed worker's units are
re-queued as before, minus the finished ones), and a test's position in a worker's
collection is a dictionary lookup. Which tests go to which worker, and in which order,
is unchanged. ``tests/conftest.py`` installs it for ``--dist loadgroup``
(``pytest_xdist_make_scheduler``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xdist.scheduler import LoadGroupScheduling


class GroupScheduling(LoadGroupScheduling):
    """:class:`~xdist.scheduler.LoadGroupScheduling` whose cost per completed test does
    not grow with the number of tests already run (see the module's docstring)."""

    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        #: worker -> {node id: its index in that worker's collection}
        self.positions: dict[Any, dict[str, int]] = {}

    def add_node_collection(self, node: Any, collection: Sequence[str]) -> None:
        super().add_node_collection(node, collection)
        registered = self.registered_collections.get(node)
        if registered is not None:
            self.positions[node] = {nodeid: i for i, nodeid in enumerate(registered)}

    def remove_node(self, node: Any) -> str | None:
        self.positions.pop(node, None)
        return super().remove_node(node)

    def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
        nodeid = self.registered_collections[node][item_index]
        scope = self._split_scope(nodeid)
        units = self.assigned_work[node]
        unit = units.get(scope)
        if unit is not None:  # (None: the unit finished already, a test reported twice)
            unit[nodeid] = True
            if all(unit.values()):
                del units[scope]
        self._reschedule(node)

    def _assign_work_unit(self, node: Any) -> None:
        scope, work_unit = self.workqueue.popitem(last=False)
        self.assigned_work.setdefault(node, {})[scope] = work_unit
        position = self.positions[node]
        node.send_runtest_some([position[nodeid] for nodeid, done in work_unit.items()
                                if not done])
