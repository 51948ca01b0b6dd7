"""``import workbench`` is light, and its public names are what they were when it was not."""

import subprocess
import sys


def _probe(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_importing_the_package_loads_no_torch():
    """The package itself imports neither torch nor pandas: a command that only reads a
    model file does not pay for them."""
    out = _probe("import sys, workbench\nprint(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'pandas'}))")
    assert out == "[]"


def test_a_stage_function_stays_the_function_when_its_submodule_loads_first():
    """``wb.capture``, ``wb.place`` and ``wb.propagate`` name functions, though
    ``workbench.capture`` … are also submodules that the import system binds on the package
    when another module imports them first."""
    out = _probe("from workbench.planning.memory_plan import plan\nimport workbench as wb\n"
                 "print(all(callable(f) and type(f).__name__ == 'function' for f in (wb.capture, wb.place, wb.propagate)))")
    assert out == "True"


def test_first_use_registers_the_copy_ops():
    """Using any stage through the package registers the ``workbench::`` ops with
    torch.library, as importing the package once did."""
    out = _probe("import workbench as wb, torch\nwb.MemoryPlan\nprint(torch.ops.workbench.h2d_copy.default.name())")
    assert out == "workbench::h2d_copy"


def test_an_unknown_name_is_an_attribute_error():
    """A name the package does not have is an AttributeError naming it, not an import error."""
    out = _probe("import workbench as wb\ntry:\n    wb.nope\nexcept AttributeError as e:\n    print(e)")
    assert out == "module 'workbench' has no attribute 'nope'"


def test_a_subpackage_is_an_attribute_on_first_use():
    """``wb.runtime`` and ``wb.machine`` are there without importing them first, as when the
    package imported every stage itself."""
    out = _probe("import workbench as wb\nprint(wb.runtime.stage_inputs.__name__, wb.machine.CostModel.__name__)")
    assert out == "stage_inputs CostModel"
