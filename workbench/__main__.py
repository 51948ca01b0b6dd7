"""``python -m workbench``: see workbench.app.cli; ``plan`` loads only what planning needs."""

import sys

if sys.argv[1:2] == ["plan"]:
    from .app.plan_command import plan_main as _plan_main

    sys.exit(_plan_main(sys.argv[2:]))

from .app.cli import main

if __name__ == "__main__":
    sys.exit(main())
