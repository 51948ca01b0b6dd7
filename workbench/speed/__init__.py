"""Decode performance: what one decode token reads, moves and launches, and its time.

- ``layout``: ``DecodeLayout`` from facts (``DecodeLayout.for_machine``); ``graph_layout``:
  the same counted from a planned graph (``layout_of``).
- ``timer``: ``time_decode(layout, cost_model)``, the one function every tokens/s comes from.
- ``published_runs``, ``run_text``, ``model_families``: the published batch-1 decode runs,
  read into structured facts; ``regime_model``: those runs timed, the fitted terms fitted
  and held out; ``validation``: how well it predicts runs it was not fitted to.

It imports the machine (``workbench.machine``) and never the reverse.
"""
