"""Re-execute the tutorial notebooks in place, so their stored outputs are today's.

    python notebooks/refresh.py                      # every NN_*.ipynb here, then solutions/
    python notebooks/refresh.py 02_memory_planning   # some of them (name, path or "02")
    python notebooks/refresh.py solutions/02_memory_planning   # one solution notebook

Each notebook runs top to bottom in a fresh kernel of *this* interpreter (not whatever
kernel named ``python3`` the machine has registered), with the notebook's folder as the
working directory, exactly as ``pytest --nbval-lax --nbval-current-env`` runs it. The
run's wall time is printed per notebook.

Rules:
1. A notebook is written back only when every cell ran without error; a failing
   notebook is left untouched and the script exits non-zero.
2. No execution timestamps and no widget state are stored, so re-running on unchanged
   code changes only what really differs (figures, timings printed by cells).
3. A cell's consecutive outputs to one stream are stored as one output: how the kernel
   happened to flush a busy machine's stdout never changes a stored notebook.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import ipykernel.kernelspec
import nbformat
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

HERE = Path(__file__).resolve().parent
DEFAULT_TIMEOUT_S = 600  # per cell; a notebook should take well under a minute in all


class _CurrentInterpreter(KernelSpecManager):
    """Every kernel name resolves to an ipykernel of the interpreter running this script."""

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return KernelSpec(resource_dir=ipykernel.kernelspec.RESOURCES, **ipykernel.kernelspec.get_kernel_dict())


def notebooks(names: list[str]) -> list[Path]:
    """The notebooks to run: all ``NN_*.ipynb`` here and the solution notebooks by default,
    else the ones named."""
    if not names:
        return sorted(HERE.glob("[0-9][0-9]_*.ipynb")) + sorted(HERE.glob("solutions/[0-9][0-9]_*.ipynb"))
    ours = sorted(HERE.glob("[0-9][0-9]_*.ipynb"))
    found = []
    for name in names:
        path = Path(name)
        candidates = [path, HERE / path, HERE / f"{name}.ipynb"]
        hit = next((c for c in candidates if c.suffix == ".ipynb" and c.is_file()), None)
        if hit is None:  # a unique prefix such as "02" names a notebook too
            prefixed = [p for p in ours if p.stem.startswith(name)]
            hit = prefixed[0] if len(prefixed) == 1 else None
        if hit is None:
            valid = ", ".join(p.stem for p in ours)
            raise SystemExit(f"no notebook {name!r} (or more than one starts so); valid names are {valid}")
        found.append(hit.resolve())
    return found


def _coalesced(outputs: list) -> list:
    """Rule 3: consecutive stream outputs of one name joined into one."""
    joined: list = []
    for out in outputs:
        last = joined[-1] if joined else None
        if out.get("output_type") == "stream" and last is not None and last.get("output_type") == "stream" \
                and last.get("name") == out.get("name"):
            last["text"] = last["text"] + out["text"]
        else:
            joined.append(out)
    return joined


def execute(path: Path, timeout: int = DEFAULT_TIMEOUT_S) -> float:
    """Run ``path`` in a fresh kernel and write it back (rule 1); return the seconds taken."""
    nb = nbformat.read(path, as_version=4)
    manager = KernelManager(kernel_spec_manager=_CurrentInterpreter(), kernel_name="python3")
    client = NotebookClient(
        nb,
        km=manager,
        timeout=timeout,
        record_timing=False,  # rule 2
        store_widget_state=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:  # rule 3
        if cell.get("outputs"):
            cell.outputs = _coalesced(cell.outputs)
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="notebooks to run (default: all NN_*.ipynb here)")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S, help="seconds per cell")
    args = parser.parse_args(argv)
    failed = []
    for path in notebooks(args.names):
        try:
            seconds = execute(path, args.timeout)
        except CellExecutionError as exc:
            failed.append(path.name)
            print(f"{path.name}: FAILED, left unchanged\n{exc}", file=sys.stderr)
            continue
        print(f"{path.name}: executed in {seconds:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
