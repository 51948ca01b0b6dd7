"""``python -m workbench``: see workbench.app.cli. ``plan`` runs in two stages: its arguments
and model file are checked (``app.plan_arguments``, light) before the planner is imported."""

import sys

if sys.argv[1:2] == ["plan"]:
    from .app.plan_arguments import checked_plan_request

    _request = checked_plan_request(sys.argv[2:])  # exits with status 2 on a bad argument or file

    from .app.plan_command import run_plan_request

    sys.exit(run_plan_request(_request))

from .app.cli import main

if __name__ == "__main__":
    sys.exit(main())
