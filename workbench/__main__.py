"""``python -m workbench``: see workbench.app.cli. Arguments are checked before a command's
modules are imported: ``plan``'s arguments and model file by ``app.plan_arguments``, every
other command's (and ``--help``) by ``app.cli_arguments``; both are light."""

import sys

if __name__ == "__main__" and sys.argv[1:2] == ["plan"]:
    from .app.plan_arguments import checked_plan_request

    _request = checked_plan_request(sys.argv[2:])  # exits with status 2 on a bad argument or file

    from .app.plan_command import run_plan_request

    sys.exit(run_plan_request(_request))

if __name__ == "__main__":
    from .app.cli_arguments import build_parser

    _args = build_parser().parse_args(sys.argv[1:])  # --help and argparse's errors end here (status 0 or 2)

    from .app.cli import run_command

    sys.exit(run_command(_args))
