"""The application built on the library: the command line and the MoE walkthrough.

- ``cli``: ``python -m workbench`` (its commands, their checks and outputs).
- ``walkthrough``: the MoE walkthrough's analyses (placement strategies compared on a
  Qwen-3.5-MoE-shaped decoder, and the best one per memory budget and link).
- ``anchors``: published decode times next to what the cost model says for the same runs.
- ``capacity_scenarios``: the capacity sweep's settings re-scored under other routing
  assumptions (a static cache pinned on other tokens or another trace, flatter routing).
- ``exercises``: the tutorial notebooks' exercise checks (a learner's prediction against
  the value the notebook computes).

The library never imports this package: the published-run model it reports on is
``workbench.speed``, the machine it times on ``workbench.machine``.
"""
