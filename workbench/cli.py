"""Command line: ``python -m workbench <command>``.

Commands:
  propagate    place and propagate a built-in example; print its graph and copies
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

import pandas as pd

__all__ = ["main"]


def _parse_placements(items: Sequence[str]) -> dict[str, list[str]]:
    """``["cuda:0=aten.linear,aten.relu", ...]`` → ``{"cuda:0": ["aten.linear", "aten.relu"]}``."""
    rules: dict[str, list[str]] = {}
    for item in items:
        device, sep, patterns = item.partition("=")
        if not sep or not device.strip() or not patterns.strip():
            raise SystemExit(
                f"--place takes DEVICE=PATTERN[,PATTERN...], e.g. cuda:0=aten.linear,aten.relu; got {item!r}"
            )
        rules.setdefault(device.strip(), []).extend(p.strip() for p in patterns.split(",") if p.strip())
    return rules


def _cmd_propagate(args: argparse.Namespace) -> int:
    import workbench as wb
    from workbench.examples import EXAMPLES, example

    if args.example not in EXAMPLES:
        raise SystemExit(f"unknown example {args.example!r}; valid ones are {', '.join(EXAMPLES)}")
    model, inputs = example(args.example)
    rules = _parse_placements(args.place) if args.place else {"cuda:0": ["aten.linear", "aten.addmm"]}
    prog = wb.capture(model, inputs, decompose=args.decompose)
    try:
        placed = wb.place(prog, rules, strict=args.strict)
    except wb.PlacementError as exc:
        raise SystemExit(f"placement failed: {exc}") from None
    dg = wb.propagate(
        placed,
        skip_h2d_for_method_inputs=args.skip_h2d,
        skip_d2h_for_method_outputs=args.skip_d2h,
    )
    with pd.option_context("display.width", 160, "display.max_colwidth", 90, "display.max_rows", 500):
        print(f"# {args.example}: {prog.num_ops()} ops, rules {rules}")
        print(f"# skip_h2d_for_method_inputs={args.skip_h2d} skip_d2h_for_method_outputs={args.skip_d2h}")
        print("\n## placed and propagated graph")
        print(dg.to_dataframe().to_string(index=False))
        print("\n## delegates")
        for d in placed.delegates:
            print(f"{d.name} on {d.device}: {', '.join(d.nodes)}")
        print("\n## copies")
        if dg.copies:
            print(dg.copies_dataframe()[["name", "kind", "src", "dst", "nbytes", "reason"]].to_string(index=False))
        else:
            print("(none)")
        counts, moved = dg.copy_counts(), dg.copy_bytes()
        print("\n## summary")
        print(", ".join(f"{k}: {counts[k]} copies, {moved[k]} B" for k in counts))
        print("resident constants: " + ", ".join(f"{d} {b} B" for d, b in dg.constant_bytes.items()))
        expected = model(*inputs)
        got = dg.module()(*inputs)
        got, expected = (got if isinstance(got, tuple) else (got,)), (expected if isinstance(expected, tuple) else (expected,))
        same = all(g.shape == e.shape and bool((g - e).abs().max() <= 1e-5) for g, e in zip(got, expected))
        print(f"propagated graph equals eager: {same}")
    return 0 if same else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m workbench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("propagate", help="place and propagate a built-in example, print graph and copies")
    p.add_argument("--example", default="residual", help="built-in example (mlp, residual, fanout, attention)")
    p.add_argument(
        "--place",
        action="append",
        metavar="DEVICE=PATTERNS",
        help="placement rule, repeatable: cuda:0=aten.linear,aten.relu (default cuda:0=aten.linear,aten.addmm)",
    )
    p.add_argument("--skip-h2d", action="store_true", help="inputs are supplied on their device")
    p.add_argument("--skip-d2h", action="store_true", help="device outputs stay on their device")
    p.add_argument("--decompose", action="store_true", help="capture core ATen ops (aten.addmm, ...)")
    p.add_argument("--strict", action="store_true", help="a pattern that matches nothing is an error")
    p.set_defaults(func=_cmd_propagate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
