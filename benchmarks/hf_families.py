"""Every mixture-of-experts causal-LM family of the installed transformers through every
stage: a tiny configuration from each family's own config class (``workbench.hf.
tiny_family_config``), seeded weights, then ``workbench.hf.try_stages`` — prefill and
decode capture (static and dynamic caches), all_on_device / experts_on_host /
expert_streaming, partial_offload, six expert caches and 4-token decodes, each compared
with eager. Prints one line per family × stage (status, seconds) and, per family, what
failed and where; a family whose model transformers itself cannot build is named with
its error.

    python benchmarks/hf_families.py [--families phimoe minimax] [--stages prefill decode_static]
"""

from __future__ import annotations

import argparse
import time

from workbench import hf
from workbench.hf.stages import STAGES, try_stages

from hf_models import _quiet  # noqa: E402  (run from the benchmarks folder or with it on the path)


def family_report(model_type: str, stages: tuple[str, ...]) -> tuple[str, list[tuple[str, str, str, float]]]:
    """(what happened, rows of (stage, status, detail, seconds)) for one family."""
    try:
        model = hf.tiny_family_model(model_type)
    except hf.TransformersBuildError as exc:  # transformers' own failure: named, not ours to fix
        return str(exc), []  # "transformers <version> cannot build ..."
    except hf.HFError as exc:
        return f"no tiny model: {exc}", []
    report = try_stages(model, name=model_type, stages=stages)
    return "", [(r.stage, r.status, r.detail, r.seconds) for r in report]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=None, help="model types (default: every MoE family found)")
    parser.add_argument("--stages", nargs="+", default=None, help="stage name prefixes (default: every stage)")
    args = parser.parse_args()
    _quiet()
    families = args.families or list(hf.moe_families())
    stages = STAGES if not args.stages else tuple(s for s in STAGES if any(s.startswith(p) for p in args.stages))
    print(f"# {len(families)} MoE families x {len(stages)} stages (tiny configurations, sim backend, compared with eager)")
    totals = {"equal": 0, "differs": 0, "error": 0}
    summary = []
    for family in families:
        start = time.perf_counter()
        note, rows = family_report(family, stages)
        if note:
            print(f"{family:22} {'-':52} {note}", flush=True)
            summary.append((family, "not built by transformers" if note.startswith("transformers") else "not built", note))
            continue
        for stage, status, detail, seconds in rows:
            totals[status] += 1
            print(f"{family:22} {stage:52} {status:8} {seconds:6.1f} s  {detail[:160]}", flush=True)
        failed = [r for r in rows if r[1] != "equal"]
        verdict = "every stage equal" if not failed else f"{len(failed)} of {len(rows)} stages fail"
        summary.append((family, verdict, failed[0][2][:200] if failed else ""))
        print(f"{family:22} {'(family)':52} {verdict} in {time.perf_counter() - start:.0f} s", flush=True)
    print(f"\n# stages: {totals['equal']} equal eager, {totals['differs']} differ, {totals['error']} errors")
    for family, verdict, detail in summary:
        print(f"{family:22} {verdict:28} {detail}")


if __name__ == "__main__":
    main()
