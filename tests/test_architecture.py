"""The package's structure, read from its source: imports, privacy, errors, types."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import workbench
from workbench.errors import WorkbenchError, WorkbenchWarning

ROOT = Path(workbench.__file__).parent
#: Packages that are optional dependencies: the only ones imported inside functions.
OPTIONAL = ("cupy", "cupyx", "executorch", "playwright", "transformers", "dask", "distributed")


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if path.name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, path: Path) -> list[tuple[ast.AST, str, str | None, bool]]:
    """(node, imported module, imported name or None, at module level) for every import."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    for n in tree.body:  # imports guarded at module level (try/if) count as module level
        if isinstance(n, (ast.If, ast.Try)):
            top |= {id(c) for c in ast.walk(n) if isinstance(c, (ast.Import, ast.ImportFrom))}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _resolve(module, path, node)
            for alias in node.names:
                found.append((node, target, alias.name, id(node) in top))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                found.append((node, alias.name, None, id(node) in top))
    return found


def _edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        for _, target, name, _ in _imports(module, path):
            full = f"{target}.{name}" if name else target
            hit = full if full in MODULES else target if target in MODULES else None
            if hit is not None and hit != module:
                edges[module].add(hit)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_has_no_cycle():
    """No module reaches itself through imports, counting imports inside functions: each
    stage depends only on earlier ones."""
    assert _cycles(_edges()) == []


def test_the_cycle_finder_finds_a_planted_cycle():
    """The check above can fail: a planted a → b → c → a cycle is reported."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(edges) == [["a", "b", "c"]]


def test_imports_inside_functions_are_only_of_optional_dependencies():
    """A function-level import hides a dependency; only optional packages may be loaded late."""
    late = []
    for module, path in MODULES.items():
        for node, target, _, at_top in _imports(module, path):
            if not at_top and not target.split(".")[0] in OPTIONAL:
                late.append(f"{module}:{node.lineno} imports {target}")
    assert late == []


def test_no_private_name_is_imported_across_modules():
    """A leading underscore means "this module's own": no other module imports it."""
    leaks = []
    for module, path in MODULES.items():
        for node, target, name, _ in _imports(module, path):
            if target.startswith("workbench") and name and name.startswith("_") and target != module:
                leaks.append(f"{module}:{node.lineno} imports {name} from {target}")
    assert leaks == []


def _package_classes() -> list[type]:
    classes = []
    for module in MODULES:
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:  # an optional dependency that is not installed
            pytest.skip(f"{module} needs an optional dependency: {exc}")
        classes += [c for _, c in inspect.getmembers(mod, inspect.isclass) if c.__module__ == module]
    return classes


def test_every_error_class_derives_from_the_one_base():
    """``except WorkbenchError`` catches every error class the package defines, and no
    error class is an ``AssertionError`` (which ``python -O`` users may not expect)."""
    errors = [c for c in _package_classes() if issubclass(c, BaseException) and not issubclass(c, Warning)]
    assert errors, "the package defines error classes"
    outside = [c.__qualname__ for c in errors if not issubclass(c, WorkbenchError)]
    assertions = [c.__qualname__ for c in errors if issubclass(c, AssertionError)]
    assert outside == [] and assertions == []


def test_every_warning_class_derives_from_the_one_base():
    """Every warning class the package defines can be filtered as a ``WorkbenchWarning``."""
    warns = [c for c in _package_classes() if issubclass(c, Warning)]
    assert warns and all(issubclass(c, WorkbenchWarning) for c in warns)


def _untyped_public_functions() -> list[str]:
    missing_types = []
    for path in MODULES.values():
        tree = ast.parse(path.read_text())

        def visit(body: list[ast.stmt], prefix: str, in_class: bool) -> None:
            for n in body:
                if isinstance(n, ast.ClassDef) and not n.name.startswith("_"):
                    visit(n.body, f"{prefix}{n.name}.", True)
                elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    if n.name.startswith("_") and n.name not in ("__init__", "__call__"):
                        continue
                    args = n.args.posonlyargs + n.args.args + n.args.kwonlyargs
                    if in_class and args and args[0].arg in ("self", "cls"):
                        args = args[1:]
                    gaps = [a.arg for a in args if a.annotation is None]
                    gaps += [f"*{v.arg}" for v in (n.args.vararg, n.args.kwarg) if v is not None and v.annotation is None]
                    if n.returns is None and n.name != "__init__":
                        gaps.append("return")
                    if gaps:
                        missing_types.append(f"{path.relative_to(ROOT.parent)}:{n.lineno} {prefix}{n.name}: {', '.join(gaps)}")

        visit(tree.body, "", False)
    return missing_types


def test_every_public_function_is_typed():
    """Public functions and methods annotate every parameter and their result."""
    assert _untyped_public_functions() == []


#: Builtin exceptions the package may raise itself, and where: a module ``__getattr__``
#: says a name is missing with ``AttributeError`` (the import protocol wants that type),
#: and an abstract method says it is abstract with ``NotImplementedError``.
_BUILTIN_RAISES_ALLOWED = {"AttributeError": "__getattr__", "NotImplementedError": None}


def _builtin_raises(source: str, label: str) -> list[str]:
    """``label:line name in function`` for each ``raise`` of a builtin exception class
    that ``_BUILTIN_RAISES_ALLOWED`` does not allow there."""
    import builtins

    tree = ast.parse(source)
    owner: dict[int, str] = {}
    for func in ast.walk(tree):  # breadth first: an inner function overwrites its outer one
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(func):
                owner[id(inner)] = func.name
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        name = target.id if isinstance(target, ast.Name) else None
        builtin = getattr(builtins, name, None) if name else None
        if not (isinstance(builtin, type) and issubclass(builtin, BaseException)):
            continue
        where = owner.get(id(node), "<module>")
        if name in _BUILTIN_RAISES_ALLOWED and _BUILTIN_RAISES_ALLOWED[name] in (None, where):
            continue
        found.append((node.lineno, f"{label}:{node.lineno} {name} in {where}"))
    return [text for _, text in sorted(found)]


def test_every_deliberate_error_is_a_workbench_error():
    """No module raises a bare builtin exception (ValueError, TypeError, ...): each error
    the package raises on purpose is a WorkbenchError subclass a caller can catch as one
    (the builtin stays a second base). Only a module __getattr__'s AttributeError and an
    abstract method's NotImplementedError are allowed."""
    found = [f for name, path in _modules().items() for f in _builtin_raises(path.read_text(), name)]
    assert found == []


def test_the_raise_finder_flags_a_planted_builtin_raise():
    """The check sees a bare ValueError, a TypeError class raised without a call, and
    passes a WorkbenchError subclass and a module __getattr__'s AttributeError."""
    source = (
        "class BadPlan(WorkbenchError, ValueError): pass\n"
        "def f(x):\n    if x: raise ValueError('no')\n    raise TypeError\n"
        "def g():\n    raise BadPlan('ok')\n"
        "def __getattr__(name):\n    raise AttributeError(name)\n"
    )
    assert _builtin_raises(source, "m") == ["m:3 ValueError in f", "m:4 TypeError in f"]


#: The model-agnostic core: capture, placement, propagation, the device graph and its node
#: records, scheduling, passes, the strategy driver, planning, the runtime, the copy ops and
#: their registry, and the kernels.
CORE = (
    "workbench.capture",
    "workbench.place",
    "workbench.propagate",
    "workbench.device_graph",
    "workbench.copy_records",
    "workbench.index_draws",
    "workbench.strategy",
    "workbench.schedule",
    "workbench.passes",
    "workbench.planning",
    "workbench.runtime",
    "workbench.copy_ops",
    "workbench.copy_variants",
    "workbench.node_facts",
    "workbench.kernels",
)
#: What the core never imports: the MoE package, transformers support, the models, the
#: views, the application layer and what is built on the core.
ABOVE_CORE = (
    "workbench.moe",
    "workbench.hf",
    "workbench.models",
    "workbench.views",
    "workbench.app",
    "workbench.sweeps",
    "workbench.compare",
    "workbench.builtin_copies",
)


def _under(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _arrows(edges: dict[str, set[str]], sources: tuple[str, ...], targets: tuple[str, ...]) -> list[str]:
    """``a -> b`` for each import of a module under ``targets`` by one under ``sources``."""
    return [f"{m} -> {t}" for m, outs in sorted(edges.items()) if _under(m, sources) for t in sorted(outs) if _under(t, targets)]


def test_the_core_imports_nothing_above_it():
    """Capture, placement, propagation, passes, planning, runtime, copy ops and kernels
    import nothing from the MoE, transformers, models, views or application modules."""
    assert _arrows(_edges(), CORE, ABOVE_CORE) == []


def test_kernels_import_nothing_from_the_runtime():
    """The kernels sit below the runtime that launches them."""
    assert _arrows(_edges(), ("workbench.kernels",), ("workbench.runtime",)) == []


def test_the_arrow_finder_finds_a_planted_arrow():
    """The two checks above can fail: a planted core → moe import is reported."""
    edges = {"workbench.propagate": {"workbench.moe.streaming"}, "workbench.moe.streaming": {"workbench.propagate"}}
    assert _arrows(edges, CORE, ABOVE_CORE) == ["workbench.propagate -> workbench.moe.streaming"]


#: The application (command line, walkthrough, anchors) and the entry point that runs it.
APPLICATION = ("workbench.app", "workbench.__main__")


def test_the_library_never_imports_the_application():
    """Only the application's own modules and ``python -m workbench`` import the
    application layer: the library is whole without it."""
    edges = {m: outs for m, outs in _edges().items() if not _under(m, APPLICATION)}
    assert _arrows(edges, ("workbench",), APPLICATION) == []


def test_no_module_imports_the_package_itself():
    """Inside the package, modules import what they use from the module that defines it,
    never ``workbench`` itself (whose ``__init__`` imports them: a cycle in waiting);
    ``from . import submodule`` is an import of that submodule."""
    found = []
    for module, path in MODULES.items():
        if module == "workbench":
            continue
        for node, target, name, _ in _imports(module, path):
            if target == "workbench" and (name is None or f"workbench.{name}" not in MODULES):
                found.append(f"{module}:{node.lineno}")
    assert found == []


#: Most lines a module may have: past it, a module holds more than one concept.
MAX_MODULE_LINES = 700


def test_no_module_is_over_the_size_cap():
    """Every module has at most MAX_MODULE_LINES lines: a longer one is split by concept."""
    sizes = {m: len(p.read_text().splitlines()) for m, p in MODULES.items()}
    assert {m: n for m, n in sizes.items() if n > MAX_MODULE_LINES} == {}


#: Where the expert code lives: discovery, the expert ops of a graph and the strategies.
MOE = "workbench.moe"


def test_expert_code_lives_in_the_moe_package():
    """No module outside ``workbench.moe`` (and the transformers support, the models, the
    application and the views, which build on it) defines an expert-finding or expert
    strategy module of its own: the package root holds none of the old five."""
    stray = [m for m in MODULES if m in ("workbench.experts", "workbench.expert_ops", "workbench.strategies")]
    assert stray == []
    assert {f"{MOE}.discovery", f"{MOE}.expert_ops", f"{MOE}.strategies"} <= set(MODULES)


def test_the_core_strategy_names_no_expert():
    """The core's strategy driver knows no MoE: ``workbench.strategy`` never says expert
    or routed (the expert strategies subclass it in ``workbench.moe.strategies``)."""
    text = MODULES["workbench.strategy"].read_text().lower()
    assert "expert" not in text and "routed" not in text


#: The package's layers, lowest first. A module imports from its own layer and the layers
#: below it, never from one above: the machine's physics never reads decode performance or
#: the application, the runtime executes on the machine's figures and owns none, decode
#: performance builds on the machine and the MoE code, and only the application sits on
#: top. (``workbench`` itself, the package's front door, re-exports from every layer.)
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("workbench.errors", "workbench.devices", "workbench.arguments", "workbench.units",
                    "workbench.file_reading", "workbench.atomic_files", "workbench.csv_files", "workbench.json_fields",
                    "workbench.name_phrases", "workbench.indexed_names", "workbench.plain_names",
                    "workbench.memory_limits", "workbench.model_source",
                    "workbench.capture_failures", "workbench.index_draws", "workbench.copy_variants",
                    "workbench.kernels")),
    ("graph", ("workbench.capture", "workbench.place", "workbench.propagate", "workbench.device_graph",
               "workbench.copy_ops", "workbench.copy_records", "workbench.node_facts", "workbench.graph_values",
               "workbench.weight_formats", "workbench.passes", "workbench.strategy", "workbench.schedule",
               "workbench.planning")),
    ("machine", ("workbench.machine",)),
    ("runtime", ("workbench.runtime", "workbench.builtin_copies")),
    ("calibration", ("workbench.machine.calibration",)),
    ("models and tools", ("workbench.models", "workbench.moe", "workbench.hf", "workbench.executorch",
                          "workbench.compare", "workbench.views")),
    ("decode performance", ("workbench.speed",)),
    ("machine plans", ("workbench.machine_plan",)),
    ("sweeps", ("workbench.sweeps",)),
    ("application", ("workbench.app", "workbench.__main__")),
)


def _layer_of(module: str) -> int | None:
    """The index of the most specific layer entry that holds ``module`` (a subpackage may
    sit above its package: ``machine.calibration`` runs the runtime); None for the root."""
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if _under(module, (prefix,)) and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    return None if best is None else best[0]


def _upward(edges: dict[str, set[str]]) -> list[str]:
    """``a (layer) -> b (layer)`` for every import of a module in a higher layer."""
    found = []
    for module, outs in sorted(edges.items()):
        low = _layer_of(module)
        if low is None:
            continue
        for target in sorted(outs):
            high = _layer_of(target)
            if high is not None and high > low:
                found.append(f"{module} ({LAYERS[low][0]}) -> {target} ({LAYERS[high][0]})")
    return found


def test_every_module_has_a_layer():
    """Each module but the package root belongs to one layer of ``LAYERS``: a new module
    is placed on purpose."""
    assert [m for m in MODULES if m != "workbench" and _layer_of(m) is None] == []


def test_every_import_points_down_the_layers():
    """No module imports one of a higher layer (imports inside functions count): the
    machine never imports decode performance or the application, the runtime never the
    calibration that runs it, nothing but the application imports the application."""
    assert _upward(_edges()) == []


def test_the_layer_check_finds_planted_upward_imports():
    """The check above can fail: the machine importing the decode timer, the runtime
    importing calibration and the MoE package importing the application are each reported."""
    edges = {
        "workbench.machine.cost_model": {"workbench.speed.timer", "workbench.machine.parts"},
        "workbench.runtime.session": {"workbench.machine.calibration.calibrate", "workbench.machine.cost_model"},
        "workbench.moe.strategies": {"workbench.app.walkthrough"},
        "workbench.machine.calibration.calibrate": {"workbench.runtime.session"},
    }
    assert _upward(edges) == [
        "workbench.machine.cost_model (machine) -> workbench.speed.timer (decode performance)",
        "workbench.moe.strategies (models and tools) -> workbench.app.walkthrough (application)",
        "workbench.runtime.session (runtime) -> workbench.machine.calibration.calibrate (calibration)",
    ]


def test_the_machine_owns_the_physics_and_the_runtime_executes():
    """The cost model, parts, op costs, runtime profiles and calibration live in
    ``workbench.machine``; decode layouts, the timer and the published-run model in
    ``workbench.speed``; ``workbench.runtime`` holds none of them."""
    assert {"workbench.machine.cost_model", "workbench.machine.costs", "workbench.machine.parts",
            "workbench.machine.op_cost", "workbench.machine.runtime_profiles",
            "workbench.machine.calibration.calibrate"} <= set(MODULES)  # fmt: skip
    assert {"workbench.speed.layout", "workbench.speed.timer", "workbench.speed.graph_layout",
            "workbench.speed.published_runs", "workbench.speed.regime_model", "workbench.speed.validation"} <= set(MODULES)
    physics = ("cost_model", "parts", "op_cost", "calibrate", "probes", "default_model", "decode_layout", "decode_graph",
               "decode_time", "runtime_profiles")
    assert [m for m in MODULES if m.startswith("workbench.runtime.") and m.rsplit(".", 1)[1] in physics] == []


def _public_definitions() -> dict[str, list[str]]:
    """Public class and function name → the modules that define it at their top level
    (a name defined twice in one module, as overloads, counts once)."""
    found: dict[str, list[str]] = {}
    for module, path in MODULES.items():
        names = {n.name for n in ast.parse(path.read_text()).body
                 if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and not n.name.startswith("_")}  # fmt: skip
        for name in names:
            found.setdefault(name, []).append(module)
    return found


def test_no_two_modules_define_the_same_public_name():
    """A public class or function name says one thing: no two modules define it (a reader
    who meets ``Placement`` or ``place`` knows which one is meant)."""
    assert {name: mods for name, mods in _public_definitions().items() if len(mods) > 1} == {}


def _shadowing(modules: dict[str, "Path"]) -> list[str]:
    """``module.name`` for each public function or class named as another module of its
    own package (``speed.graph_layout.timer`` would hide the module ``speed.timer``)."""
    found = []
    for module, path in modules.items():
        package = module.rsplit(".", 1)[0] if not path.name == "__init__.py" else module
        siblings = {m.rsplit(".", 1)[1] for m in modules if "." in m and m.rsplit(".", 1)[0] == package and m != module}
        for n in ast.parse(path.read_text()).body:
            if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name in siblings:
                found.append(f"{module}.{n.name}")
    return found


def test_no_function_is_named_as_another_module_of_its_package():
    """No public function or class has the name of a sibling module: its package's
    attribute of that name would be the module or the function depending on import order."""
    assert _shadowing(MODULES) == []


def test_the_moved_module_alias_layer_is_gone():
    """Old module paths are not served: tests, notebooks and scripts import the real paths."""
    assert "workbench.moved_modules" not in MODULES
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("workbench.anchors")


def test_the_shadow_finder_finds_a_planted_function(tmp_path):
    """The check above can fail: a function ``timer`` in ``speed.graph_layout`` beside a
    module ``speed.timer`` is reported; the same name in another package is not."""
    (tmp_path / "graph_layout.py").write_text("def timer():\n    pass\n")
    (tmp_path / "timer.py").write_text("")
    (tmp_path / "other.py").write_text("def timer():\n    pass\n")
    modules = {"workbench.speed.graph_layout": tmp_path / "graph_layout.py", "workbench.speed.timer": tmp_path / "timer.py",
               "workbench.views.other": tmp_path / "other.py"}  # fmt: skip
    assert _shadowing(modules) == ["workbench.speed.graph_layout.timer"]
