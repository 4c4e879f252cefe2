"""Auto-tuning: search spaces of the default schedules, a cost model, search, measurement
and tuning records (``docs/tuning.md``).

* :mod:`~toolchain.autotune.space` — knobs, rules, spaces and replayable traces;
* :mod:`~toolchain.autotune.apply` — which point a schedule builds (:func:`decide`);
* :mod:`~toolchain.autotune.records` — JSON-lines tuning records;
* :mod:`~toolchain.autotune.features` — features of the lowered loop program;
* :mod:`~toolchain.autotune.model` — the xgboost rank model;
* :mod:`~toolchain.autotune.search` — random and model-guided search;
* :mod:`~toolchain.autotune.measure` — builders and runners;
* :mod:`~toolchain.autotune.tasks` — a model's tunable kernels;
* :mod:`~toolchain.autotune.tuner` — the task scheduler and the tuning loop.

Only :mod:`space` and :mod:`apply` are imported by the schedules; the rest load on demand
(xgboost and Ray are imported only when used).
"""

from toolchain.autotune.apply import applying, decide, declared, forcing
from toolchain.autotune.space import InvalidPoint, Knob, Rule, Space, Trace

__all__ = ["InvalidPoint", "Knob", "Rule", "Space", "Trace", "applying", "declared", "decide",
           "forcing"]
