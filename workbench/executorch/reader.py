"""The one reader of ExecuTorch's program schema: ``schema.Program`` → ``ExecuTorchProgram``.

``read_program`` takes ExecuTorch's own ``executorch.exir.schema.Program`` — what an
``ExecutorchProgramManager`` holds in ``.executorch_program`` and what ExecuTorch's
deserializer returns for a ``.pte`` file — and returns an ``ExecuTorchProgram``. It is
the one reader of the schema: both sources go through it, so they give equal data.

Rules:
1. One method is read (``forward`` by default, or the only one). Its instructions run in
   chain order; a program with control flow (``JumpFalseCall``) is refused.
2. Dataflow: a kernel writes the tensors at its schema's out arguments (``operators``) and
   reads the others; an operator torch does not know writes the tensor arguments no
   earlier call wrote. A delegate call lists its inputs, then its outputs: it writes the
   arguments after the last one already written. A ``MoveCall`` reads one value and writes
   another; a ``FreeCall`` does neither.
   A planned tensor read before any call wrote it is a view ExecuTorch elided (it emits no
   instruction for a static view of planned memory) when an earlier tensor has the same
   buffer, offset and bytes — the latest such tensor is its base; otherwise it is state the
   program keeps (a mutable buffer).
3. A call's kind: ``copy`` for ExecuTorch's ``et_copy`` h2d/d2h ops, ``delegate`` for a
   ``DelegateCall``, ``kernel`` for any other ``KernelCall`` (a ``MoveCall`` is a kernel
   that reads one value and writes another).
4. Devices: a planned tensor lives on its buffer's device (``non_const_buffer_device``;
   an unlisted buffer is the host); an unplanned tensor on the device of its
   ``extra_tensor_info`` (else the host). A delegate runs on the device its compile spec
   ``target_device`` names, else on the device of the tensors it writes; a kernel on the
   host; a copy on its destination.
5. A copy moves the bytes of the tensor it writes, from the device of the tensor it reads.
6. ``buffer_sizes`` are ``non_const_buffer_sizes`` as stored: index 0 is reserved for
   constants and holds no planned tensor.
7. A program with no device metadata at all — no buffer device, no tensor on a device,
   no delegate naming a ``target_device`` — is refused (``MissingDeviceMetadata``)
   unless ``host_only=True``: it was lowered for the host, or by an ExecuTorch without
   device support, and has no placement to show.
"""

from __future__ import annotations

import builtins
import keyword
import math
from dataclasses import dataclass
from typing import Any, Optional

from ..devices import CPU, CopyKind, Device, DeviceError
from .dependency import executorch_api
from .errors import ExecuTorchImportError, MissingDeviceMetadata, UnsupportedProgram
from .operators import argument_count, torch_overload, written_positions
from .program import COPY_OPS, TARGET_DEVICE_KEY, ExecuTorchProgram, ProgramCall, ProgramTensor, TensorList

__all__ = ["read_program"]


def read_program(program: Any, method: Optional[str] = None, *, host_only: bool = False) -> ExecuTorchProgram:
    """ExecuTorch's ``schema.Program`` as an ``ExecuTorchProgram`` (see the module's rules).

    Raises ``UnsupportedProgram`` for control flow or an unknown device,
    ``ExecuTorchImportError`` for an unknown method, and ``MissingDeviceMetadata`` for a
    program without device metadata unless ``host_only`` (rule 7).
    """
    et = executorch_api()
    plan = _execution_plan(program, method)
    try:
        buffer_devices = _buffer_devices(et, plan)
        instructions = [ins.instr_args for chain in plan.chains for ins in chain.instructions]
        raw_calls = [_raw_call(et, plan, position, args) for position, args in enumerate(instructions)]
        flow = _Dataflow(et, plan)
        for raw in raw_calls:
            flow.add(raw)
        tensors = flow.tensors(buffer_devices)
    except IndexError as exc:  # a damaged file whose indices point past its tables
        raise ExecuTorchImportError(
            f"the program is malformed: an index in method {plan.name!r} points past its tables ({exc}); "
            "the .pte file may be damaged"
        ) from None
    calls = tuple(
        _call(raw, flow.names[raw.position], reads, writes, tensors) for raw, (reads, writes) in zip(raw_calls, flow.io)
    )
    result = ExecuTorchProgram(
        method=str(plan.name),
        tensors=tensors,
        scalars=_scalars(et, plan, flow.tensor_values),
        calls=calls,
        inputs=flow.inputs,
        outputs=tuple(int(i) for i in plan.outputs),
        buffer_sizes=tuple(int(s) for s in plan.non_const_buffer_sizes),
        buffer_devices=buffer_devices,
        schema_version=int(getattr(program, "version", 0)),
    )
    if not host_only:
        _require_device_metadata(result, plan)
    return result


def _execution_plan(program: Any, method: Optional[str]) -> Any:
    plans = list(program.execution_plan)
    names = [str(p.name) for p in plans]
    if not plans:
        raise ExecuTorchImportError("the ExecuTorch program has no method (its execution_plan is empty)")
    if method is None:
        method = names[0] if len(plans) == 1 else "forward"
    if method not in names:
        raise ExecuTorchImportError(
            f"the ExecuTorch program has no method {method!r}; its methods are {', '.join(names)}"
        )
    return plans[names.index(method)]


def _device(et: Any, device_type: Any, index: int) -> Device:
    kind = et.schema.DeviceType(int(device_type)).name.lower()
    return Device.parse(kind if kind == "cpu" else f"{kind}:{int(index)}")


def _buffer_devices(et: Any, plan: Any) -> tuple[Device, ...]:
    devices = [CPU] * len(plan.non_const_buffer_sizes)
    for entry in plan.non_const_buffer_device or ():
        if not 0 <= entry.buffer_idx < len(devices):
            raise UnsupportedProgram(
                f"non_const_buffer_device names buffer {entry.buffer_idx}, but the method has "
                f"{len(devices)} buffers (non_const_buffer_sizes)"
            )
        devices[entry.buffer_idx] = _device(et, entry.device_type, entry.device_index)
    return tuple(devices)


def _is_constant(et: Any, val: Any) -> bool:
    """A tensor whose data the program carries (constant buffer, segment or external data)."""
    if not isinstance(val, et.schema.Tensor) or val.allocation_info is not None:
        return False
    info = val.extra_tensor_info
    external = info is not None and int(info.location) == int(et.schema.TensorDataLocation.EXTERNAL)
    return int(val.data_buffer_idx) > 0 or external


@dataclass(frozen=True)
class _RawCall:
    position: int
    kind: str
    op: str
    base_name: str
    arguments: tuple[int, ...]
    backend: Optional[str] = None
    delegate_index: Optional[int] = None
    compile_specs: tuple[tuple[str, bytes], ...] = ()
    copy_kind: Optional[CopyKind] = None
    operator: Optional[tuple[str, str]] = None  # kernel: (operator name, overload)


def _raw_call(et: Any, plan: Any, position: int, args: Any) -> _RawCall:
    """One instruction, before dataflow: its kind, op and arguments (rule 3)."""
    schema = et.schema
    if isinstance(args, schema.KernelCall):
        operator = plan.operators[args.op_index]
        op = f"{operator.name}.{operator.overload}" if operator.overload else str(operator.name)
        kind = "copy" if operator.name in COPY_OPS else "kernel"
        base = str(operator.name).split("::")[-1].lstrip("_")
        return _RawCall(
            position, kind, op, base, tuple(int(a) for a in args.args), copy_kind=COPY_OPS.get(operator.name),
            operator=(str(operator.name), str(operator.overload)),
        )  # fmt: skip
    if isinstance(args, schema.DelegateCall):
        delegate = plan.delegates[args.delegate_index]
        specs = tuple((str(s.key), bytes(s.value)) for s in delegate.compile_specs)
        return _RawCall(
            position, "delegate", str(delegate.id), f"delegate_{args.delegate_index}", tuple(int(a) for a in args.args),
            backend=str(delegate.id), delegate_index=int(args.delegate_index), compile_specs=specs,
        )  # fmt: skip
    if isinstance(args, schema.MoveCall):
        return _RawCall(position, "kernel", "move", "move", (int(args.move_from), int(args.move_to)))
    if isinstance(args, schema.FreeCall):
        return _RawCall(position, "kernel", "free", "free", ())
    raise UnsupportedProgram(
        f"instruction {position} is a {type(args).__name__}: programs with control flow cannot be "
        "imported (the workbench's graph has no branches); import a method without it"
    )


class _Dataflow:
    """Rule 2, one call at a time: what each call reads and writes, and every tensor's name."""

    def __init__(self, et: Any, plan: Any) -> None:
        self.et, self.plan = et, plan
        self.tensor_values = {i for i, v in enumerate(plan.values) if isinstance(v.val, et.schema.Tensor)}
        self.constants = {i for i in self.tensor_values if _is_constant(et, plan.values[i].val)}
        self.inputs = tuple(int(i) for i in plan.inputs)
        self.defined = set(self.inputs) | self.constants
        self.namer = _Namer()
        self.names: dict[int, str] = {}  # call position → call name
        self.io: list[tuple[tuple[int, ...], tuple[int, ...]]] = []  # per call: (reads, writes)
        self.written: dict[int, str] = {}  # value → the name of the tensor (its writer's)
        self.views: dict[int, int] = {}  # elided view → its base
        self.state: set[int] = set()
        self.slots: dict[tuple[int, int, int], int] = {}  # (buffer, offset, bytes) → latest tensor there
        for index in self.inputs:
            self._claim(index)

    def add(self, raw: _RawCall) -> None:
        reads, writes = self._split(raw)
        for index in reads:
            if index not in self.defined:
                self._read_unwritten(index)
        name = self.namer.take(raw.base_name)
        for k, index in enumerate(writes):
            self.written[index] = name if len(writes) == 1 else self.namer.take(f"{name}_out{k}")
            self._claim(index)
        self.defined.update(writes)
        self.names[raw.position] = name
        self.io.append((reads, writes))

    def _split(self, raw: _RawCall) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(reads, writes) of one call, in argument order."""
        args = raw.arguments
        if raw.kind in ("kernel", "copy") and raw.operator is not None:
            op = torch_overload(*raw.operator)
            if op is not None and len(args) >= argument_count(op):
                out = set(written_positions(op))
                schema_args = args[: argument_count(op)]
                writes = self._tensors(a for k, a in enumerate(schema_args) if k in out)
                reads = self._tensors(a for k, a in enumerate(schema_args) if k not in out)
                return tuple(i for i in reads if i not in writes), writes
        tensors = self._tensors(args)
        if raw.kind == "delegate":
            defined = [k for k, i in enumerate(tensors) if i in self.defined]
            cut = defined[-1] + 1 if defined else 0
            return tensors[:cut], tensors[cut:]
        return tuple(i for i in tensors if i in self.defined), tuple(i for i in tensors if i not in self.defined)

    def _tensors(self, arguments: Any) -> tuple[int, ...]:
        """The tensor values among ``arguments``, lists of tensors flattened, each once."""
        out: list[int] = []
        for index in arguments:
            if index in self.tensor_values:
                out.append(index)
            elif 0 <= index < len(self.plan.values):
                val = self.plan.values[index].val
                if isinstance(val, (self.et.schema.TensorList, self.et.schema.OptionalTensorList)):
                    out.extend(int(i) for i in val.items if int(i) in self.tensor_values)
        return tuple(dict.fromkeys(out))

    def _slot(self, index: int) -> Optional[tuple[int, int, int]]:
        val = self.plan.values[index].val
        alloc = val.allocation_info
        if alloc is None:
            return None
        nbytes = math.prod(int(s) for s in val.sizes) * _itemsize(self.et, val)
        return int(alloc.memory_id), int(alloc.memory_offset), nbytes

    def _claim(self, index: int) -> None:
        slot = self._slot(index)
        if slot is not None:
            self.slots[slot] = index

    def _read_unwritten(self, index: int) -> None:
        """Rule 2's elided view or state."""
        slot = self._slot(index)
        base = self.slots.get(slot) if slot is not None else None
        if base is not None:
            self.views[index] = base
        else:
            self.state.add(index)
        self.defined.add(index)

    def tensors(self, buffer_devices: tuple[Device, ...]) -> dict[int, ProgramTensor]:
        """Every tensor value, named and placed (rule 4)."""
        out: dict[int, ProgramTensor] = {}
        position = {index: k for k, index in enumerate(self.inputs)}
        for index in sorted(self.tensor_values):
            val = self.plan.values[index].val
            if index in self.constants:
                role, name = (
                    "constant",
                    self.namer.take(_constant_name(val.extra_tensor_info, index)),
                )
            elif index in position:
                role, name = "input", self.namer.take(f"input_{position[index]}")
            elif index in self.written:
                role, name = "activation", self.written[index]
            elif index in self.views:
                role, name = "view", self.namer.take(f"view_{index}")
            elif index in self.state:
                role, name = "state", self.namer.take(f"state_{index}")
            else:
                role, name = "unused", self.namer.take(f"value_{index}")
            out[index] = _tensor(self.et, index, val, name, role, buffer_devices, self.views.get(index))
        return out


def _itemsize(et: Any, val: Any) -> int:
    return int(et.get_scalar_type(et.schema.ScalarType(int(val.scalar_type))).itemsize)


def _tensor(
    et: Any,
    index: int,
    val: Any,
    name: str,
    role: str,
    buffer_devices: tuple[Device, ...],
    view_of: Optional[int],
) -> ProgramTensor:
    dtype = et.get_scalar_type(et.schema.ScalarType(int(val.scalar_type)))
    shape = tuple(int(s) for s in val.sizes)
    info, alloc = val.extra_tensor_info, val.allocation_info
    memory_id = int(alloc.memory_id) if alloc is not None else None
    if memory_id is not None:
        if not 0 < memory_id < len(buffer_devices):
            raise UnsupportedProgram(
                f"value {index} is planned in buffer {memory_id}, but the method has buffers "
                f"1..{len(buffer_devices) - 1} (non_const_buffer_sizes)"
            )
        device = buffer_devices[memory_id]  # rule 4
    elif info is not None:
        device = _device(et, info.device_type, info.device_index)
    else:
        device = CPU
    return ProgramTensor(
        index=index,
        name=name,
        shape=shape,
        dtype=dtype,
        nbytes=math.prod(shape) * dtype.itemsize,
        device=device,
        role=role,
        memory_id=memory_id,
        offset=int(alloc.memory_offset) if alloc is not None else None,
        view_of=view_of,
    )


def _constant_name(info: Any, index: int) -> str:
    fqn = getattr(info, "fully_qualified_name", None) if info is not None else None
    if fqn:
        return "".join(ch if ch.isalnum() else "_" for ch in str(fqn))
    return f"constant_{index}"


def _call(
    raw: _RawCall,
    name: str,
    reads: tuple[int, ...],
    writes: tuple[int, ...],
    tensors: dict[int, ProgramTensor],
) -> ProgramCall:
    if raw.kind == "delegate":
        device = _delegate_device(raw, [tensors[i] for i in writes], name)
    elif raw.kind == "copy":
        device = tensors[writes[0]].device if writes else CPU
    else:
        device = CPU
    return ProgramCall(
        index=raw.position,
        name=name,
        kind=raw.kind,
        op=raw.op,
        device=device,
        arguments=raw.arguments,
        reads=reads,
        writes=writes,
        backend=raw.backend,
        delegate_index=raw.delegate_index,
        compile_specs=raw.compile_specs,
        copy_kind=raw.copy_kind,
    )


def _delegate_device(raw: _RawCall, outputs: list[ProgramTensor], name: str) -> Device:
    """Rule 4: the compile spec's ``target_device``, else the device of what it writes."""
    for key, value in raw.compile_specs:
        if key == TARGET_DEVICE_KEY:
            text = value.decode("utf-8", "replace").strip("\x00")
            try:
                return Device.parse(text)
            except DeviceError as exc:
                raise UnsupportedProgram(
                    f"{name} ({raw.op}): compile spec {TARGET_DEVICE_KEY}={text!r}: {exc}"
                ) from None
    devices = {t.device for t in outputs if not t.device.is_host}
    return devices.pop() if len(devices) == 1 else CPU


def _scalars(et: Any, plan: Any, tensor_values: set[int]) -> dict[int, Any]:
    """Every non-tensor value as a Python value (lists of ints resolved, tensor lists as ``TensorList``)."""
    schema = et.schema
    out: dict[int, Any] = {}
    for index, evalue in enumerate(plan.values):
        if index in tensor_values:
            continue
        val = evalue.val
        if isinstance(val, schema.Int):
            out[index] = int(val.int_val)
        elif isinstance(val, schema.Bool):
            out[index] = bool(val.bool_val)
        elif isinstance(val, schema.Double):
            out[index] = float(val.double_val)  # "inf" / "-inf" parse too
        elif isinstance(val, schema.String):
            out[index] = str(val.string_val)
        elif isinstance(val, schema.IntList):  # items are the indices of Int values
            out[index] = [int(plan.values[i].val.int_val) for i in val.items]
        elif isinstance(val, (schema.BoolList, schema.DoubleList)):
            out[index] = list(val.items)
        elif isinstance(val, (schema.TensorList, schema.OptionalTensorList)):
            out[index] = TensorList(tuple(int(i) for i in val.items))
        else:  # Null
            out[index] = None
    return out


def _require_device_metadata(program: ExecuTorchProgram, plan: Any) -> None:
    """Rule 7."""
    listed = bool(plan.non_const_buffer_device)
    on_device = any(not t.device.is_host for t in program.tensors.values())
    targeted = any(key == TARGET_DEVICE_KEY for c in program.delegate_calls for key, _ in c.compile_specs)
    if listed or on_device or targeted:
        return
    raise MissingDeviceMetadata(
        f"method {program.method!r} carries no device metadata: non_const_buffer_device is empty, no "
        f"tensor has a device in its extra_tensor_info, and no delegate names a {TARGET_DEVICE_KEY!r} "
        "compile spec. It was lowered for the host only, or by an ExecuTorch without device support. "
        "Lower it with a partitioner whose delegates carry CompileSpec('target_device', b'cuda:0') and "
        "ExecutorchBackendConfig(enable_non_cpu_memory_planning=True), or pass host_only=True to import "
        "it as a host-only program"
    )


class _Namer:
    """Unique names that torch.fx keeps as they are: identifiers, neither a keyword nor a
    builtin (``sum`` → ``sum_1``); the base, then ``<base>_1``, ``<base>_2`` …"""

    def __init__(self) -> None:
        self._taken: set[str] = set()

    def take(self, base: str) -> str:
        base = base if base.isidentifier() else "v_" + "".join(ch if ch.isalnum() else "_" for ch in base)
        name, k = base, 0
        while name in self._taken or keyword.iskeyword(name) or name in vars(builtins):
            k += 1
            name = f"{base}_{k}"
        self._taken.add(name)
        return name
