"""Compiled model pieces on a CPU: captured once by dynamo, then called directly.

``torch.compile`` pays a fixed cost on every call of a compiled function: dynamo's frame prologue extracts each
input and its symbolic sizes and evaluates guards. With dynamic shapes and a model's weights and KV buffers as
inputs that costs as much per call as a whole recurrence of a small model (docs/speed.md). A :class:`Program` uses
dynamo only to capture the function once per specialisation (:func:`prepare`'s signature), compiles the graph with
inductor, and from then on calls the compiled graph itself with its inputs gathered by one generated expression,
and where it can, inductor's generated code below the graph's per-call wrappers (:func:`direct`). A runner's
:class:`Programs` picks the program of each call (by step and specialisation) and checks the signatures its callers
vouch for.

Contract of the functions compiled this way (the engine's pieces respect it):

- a :class:`~recdiff.engine.step.Step` ``st(owner, *args)``: ``owner`` (the runner, and its model) is fixed for the
  program's life (its tensors are looked up once, at capture; the model's parameters are copied into the graph as
  constants, see :data:`PATCHES`); ``args`` are tensors, the only thing that changes between calls.
- no Python side effects (nothing assigned to objects, no prints); no randomness; every Python constant the
  function depends on (a flag, ε, η, a count) is in the step's constants, which key the program with it.
- it returns a tuple of new tensors. It may write into its argument tensors (the graph makes the same writes; the
  capture's check in :func:`direct` compares them too); its caller then hands them in contiguous and vouched for
  (:class:`Programs`' ``sig``), as :func:`prepare` would otherwise hand the program a copy.

The arguments' dimensions are dynamic (one graph for every batch width, wavefront width, prompt length and key
count; weights and KV buffers are static) with duck sizing off, so two dimensions that happened to be equal at
capture are never assumed equal later. Dynamo still specialises a dimension of size 1; :func:`prepare`'s signature
therefore includes, for every argument, which of its dimensions are 1, and a call with a new pattern captures a new
graph. Guards are not evaluated on replay: the key is what makes a replay valid, which is why everything the
function depends on must be in it.
"""

from __future__ import annotations

import functools
import os
import warnings
from types import SimpleNamespace
from typing import Any, Callable

import torch
from torch import Tensor

from recdiff import compat
from recdiff.engine.step import Step

# inductor's C++ wrapper calls the kernels from C++ (faster calls of a small model's layers than its Python wrapper,
# at a longer compile: docs/speed.md); RECDIFF_CPP_WRAPPER=0 selects the Python wrapper
CPP_WRAPPER = os.environ.get("RECDIFF_CPP_WRAPPER", "1") != "0"

# Parameters are frozen into each graph as constants (prepacked copies: a compiled piece pays the weights' memory
# again) so that inductor may use its own C++ GEMM template for products with a weight, faster than MKL's sgemm for
# the few rows of a wavefront or a batch on small models. max-autotune times the template against ATEN once per
# shape; the choice is cached on disk (inductor's autotune cache), so processes on one machine share it.
PATCHES = {"cpp_wrapper": CPP_WRAPPER, "freezing": True, "max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN",
           "autotune_num_choices_displayed": 0, "max_autotune_report_choices_stats": False}


FEATURE = "compile=True on a CPU (the CPU compile path)"


@functools.cache
def internals() -> SimpleNamespace:
    """The private torch pieces this module uses (inductor's config, ``compile_fx`` and CPU ISA list, the
    symbolic-shape config, dynamo's ``maybe_mark_dynamic`` and ``reset_code``), looked up once. A torch without them
    gives one :class:`~recdiff.errors.RecdiffError` line (:func:`recdiff.compat.private`), before anything is
    compiled; importing this module needs none of them (eager and CUDA runs never touch them)."""

    def lookup() -> SimpleNamespace:
        import torch._dynamo
        import torch._inductor.config as inductor_config
        import torch.fx.experimental._config as fx_config
        from torch._inductor.compile_fx import compile_fx
        from torch._inductor.cpu_vec_isa import valid_vec_isa_list

        for key in PATCHES:  # a config key that this torch does not have: AttributeError, named
            getattr(inductor_config, key)
        fx_config.use_duck_shape  # noqa: B018
        return SimpleNamespace(inductor_config=inductor_config, fx_config=fx_config, compile_fx=compile_fx,
                               maybe_mark_dynamic=torch._dynamo.maybe_mark_dynamic,
                               reset_code=torch._dynamo.reset_code, vec_isas=valid_vec_isa_list)

    return compat.private(FEATURE, lookup, fallback="use compile=False (eager) on this machine")


# Rows (the product of the first argument's dimensions but a float's last) from which a call takes the "many rows"
# graph. Inductor blocks its GEMMs for the row count met at capture, so a graph captured at a wavefront's few rows
# runs a prefill's many slowly, and the other way round; the two cross between 8 and 16 rows (docs/speed.md).
MANY_ROWS = 16


def rows(a: Tensor) -> int:
    """Rows of an argument: every dimension of an id tensor, all but the feature dimension of a float one."""
    return a.numel() // a.shape[-1] if a.is_floating_point() and a.dim() else a.numel()


@functools.lru_cache(maxsize=4096)
def _layout(shape: torch.Size) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    """Row-major strides of ``shape`` (also in size-1 dimensions, whose strides a compiled graph asserts too) and
    which of its dimensions are 1. Cached: a step meets few shapes, and this is on every compiled call's path."""
    strides, n = [], 1
    for size in reversed(shape):
        strides.append(n)
        n *= size
    return tuple(reversed(strides)), tuple(s == 1 for s in shape)


def prepare(args: tuple[Tensor, ...]) -> tuple[tuple[Tensor, ...], tuple]:
    """The arguments with row-major strides (compiled graphs assume their inputs' layout; a copy only where one has
    other strides) and what a captured graph is specialised on besides its step: the dtype and the size-1
    dimensions of each argument (dynamo specialises sizes 0 and 1 even under dynamic shapes), and whether the first
    argument has :data:`MANY_ROWS` rows or more (two graphs per piece at most, each blocked for its kind of call).
    One pass over the arguments: this runs before every compiled call that no caller vouched for."""
    dense, sig = [], [rows(args[0]) >= MANY_ROWS]
    for a in args:
        shape = a.shape
        strides, ones = _layout(shape)
        if a.stride() != strides:
            # contiguous but for the strides of size-1 dimensions (a batch-1 slice of a buffer): a view has them right
            a = a.view(shape) if a.is_contiguous() else torch.empty(shape, dtype=a.dtype, device=a.device).copy_(a)
        dense.append(a)
        sig.append((a.dtype, ones))
    return tuple(dense), tuple(sig)


class Program:
    """``fn`` compiled for one specialisation; call it with ``args`` of that specialisation only."""

    def __init__(self, st: Step, model: Any, owner: Any, patches: dict[str, Any] | None = None,
                 static: tuple[tuple[int, ...], ...] | None = None) -> None:
        self.st, self.model, self.owner, self.patches = st, model, owner, patches or {}
        self.static = static  # per argument, the dimensions kept static (the caller's constants: slots, S, E, V)
        self.compiled: Callable[..., Any] | None = None
        self.gather: Callable[[tuple[Tensor, ...], list[Any]], list[Any]] | None = None
        self.fixed: list[Any] = []
        # inductor's generated ``call(inputs)``, where the layers around it do nothing for this graph (:func:`direct`)
        self.direct: Callable[[list[Any]], Any] | None = None

    def __call__(self, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        if self.compiled is None:
            return self._capture(args)
        if self.direct is not None:
            return tuple(self.direct(self.gather(args, self.fixed)))
        return tuple(self.compiled(*self.gather(args, self.fixed)))

    # ------------------------------------------------------------------------------------------ capture
    def _capture(self, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        api = internals()
        sources: list[str] = []
        graph_out: list[Any] = []

        def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
            for node in gm.graph.nodes:
                if node.op == "placeholder":
                    name = node.meta["grapharg"].source.name
                    sources.append(name() if callable(name) else name)
            compiled = api.compile_fx(gm, example_inputs)  # under PATCHES (set around the trace below)

            def first_call(*inputs: Any) -> Any:
                graph_out.append(compiled(*inputs))
                return graph_out[-1]

            self.compiled = compiled
            return first_call

        # each capture gets a code object of its own, so dynamo keeps exactly one graph for it
        def piece(model: Any, owner: Any, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
            return self.st(owner, *args)

        # only the arguments' dimensions vary; weights and KV buffers keep static shapes (a symbolic size is one more
        # input to convert on every call). The marks go on aliases (the same memory): dynamo keeps a mark on the tensor
        # object, and a caller's tensor marked by one program's capture would be dynamic in the next's (the
        # diffusion state, taken by P with every dimension dynamic and by advance with its sizes fixed)
        args = tuple(a.detach() for a in args)
        static = self.static or ((),) * len(args)
        for a, fixed in zip(args, static, strict=True):
            for d, size in enumerate(a.shape):
                if size != 1 and d not in fixed:
                    api.maybe_mark_dynamic(a, d)
        fn = torch.compile(piece, backend=backend, dynamic=False, fullgraph=True)
        # PATCHES hold while dynamo traces too: with freezing on, parameters become graph constants, not inputs.
        # Over them the program's own overrides (a sampler's small tensor functions), then
        # engine_options["inductor"], this model's (e.g. the tests' quick-compile settings)
        patches = {**PATCHES, **self.patches, **self.model.engine_options.get("inductor", {})}
        before = tuple(a.clone() for a in args)  # the arguments as the capture found them (it may write them)
        # inductor caches the CPU's vector ISAs once per process, filtered by cpp.vec_isa_ok as it holds at that first
        # call: looked up here, outside the patches, so that a model whose settings turn vectorization off does not
        # turn it off for the rest of the process (where a vectorized graph from the disk cache would then not build)
        api.vec_isas()
        with api.fx_config.patch(use_duck_shape=False), api.inductor_config.patch(patches), torch.no_grad(), \
                warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="TypedStorage is deprecated")  # inductor's autotuner, not ours
            out = fn(self.model, self.owner, args)
        api.reset_code(piece.__code__)  # replays never go through dynamo: free its cache entry
        self._plan(sources)
        self.direct = direct(self.compiled, self.gather(before, self.fixed), graph_out[0] if graph_out else None,
                             self.gather(args, self.fixed))
        # a replay returns the graph's outputs: they must be exactly what the function returned (dynamo rebuilds a
        # returned input, or a tensor returned twice, outside the graph)
        if len(graph_out) != 1 or not isinstance(out, tuple) or len(out) != len(graph_out[0]) or any(
                a is not b for a, b in zip(out, graph_out[0])):
            raise TypeError(f"{self.st.name}: a Program must return a tuple of distinct new tensors")
        return out

    def _plan(self, sources: list[str]) -> None:
        """One expression that gathers the graph's inputs in placeholder order: per-call ones from ``args``
        (``L['args'][i]`` and their sizes), the others (weights, KV buffers and their sizes) looked up now."""
        env = {"L": {"model": self.model, "owner": self.owner}, "G": self.st.fn.__globals__}
        parts = []
        for src in sources:
            if src.startswith("L['args']"):
                parts.append(src.replace("L['args']", "a", 1))
            else:
                self.fixed.append(eval(src, {"__builtins__": {}}, env))  # noqa: S307 (dynamo's own source text)
                parts.append(f"f[{len(self.fixed) - 1}]")
        self.gather = eval(f"lambda a, f: [{', '.join(parts)}]")  # noqa: S307


def direct(compiled: Callable[..., Any], inputs: list[Any], expected: Any, written: list[Any]
           ) -> Callable[[list[Any]], Any] | None:
    """Inductor's generated ``call(inputs)`` inside ``compiled`` (what ``compile_fx`` returned), where calling it
    directly does what ``compiled`` does; else None. Around it, on every call, sit dynamo's disable context, AOT
    autograd's runtime wrapper (which prepends the graph module's own parameters, bumps the version counters of
    mutated inputs and marks outputs dynamic: nothing a replay here needs) and, with frozen weights, freezing's
    wrapper (which drops those parameters again): a cost per call that a small model's step feels (docs/speed.md).
    Used only where the generated code takes exactly the program's own inputs, in order, and a call with ``inputs``
    (copies of the capture's arguments as it found them) returns the capture's outputs, as many (none added for
    mutated inputs or aliased outputs) and of the same values, and leaves its arguments as the capture left its own
    (``written``: a function that writes its arguments in place does so here too). The torch internals are found by
    name; any other structure keeps the full path."""
    if expected is None:
        return None
    found: dict[str, Any] = {}

    def walk(f: Any, depth: int) -> None:
        code = getattr(f, "__code__", None)
        if code is None or depth > 6:
            return
        for name, cell in zip(code.co_freevars, f.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            if name in ("params_buffers_flat", "preserved_arg_indices", "unwrapped_args_offsets"):
                found.setdefault(name, value)
            elif callable(getattr(value, "current_callable", None)):  # inductor's CompiledFxGraph
                found.setdefault("graph", value)
            elif callable(value) and not isinstance(value, type):
                walk(value, depth + 1)

    walk(compiled, 0)
    if "graph" not in found:
        return None
    n_params = len(found.get("params_buffers_flat") or ())
    kept = found.get("preserved_arg_indices")
    kept = list(range(n_params + len(inputs)) if kept is None else kept)
    if kept != list(range(n_params, n_params + len(inputs))) or any(found.get("unwrapped_args_offsets") or ()):
        return None
    call = found["graph"].current_callable
    out = call(list(inputs))
    same = isinstance(out, (list, tuple)) and len(out) == len(expected) and all(map(_equal, out, expected)) and all(
        _equal(a, b) for a, b in zip(inputs, written) if isinstance(b, Tensor))
    return call if same else None


def _equal(a: Any, b: Tensor) -> bool:
    return isinstance(a, Tensor) and a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


# ---------------------------------------------------------------------------------------------- dispatch
# A caller that hands in its arguments' specialisation (sig) skips prepare(); its sig is checked against prepare()
# on the key's first call and every CHECK_EVERY-th after (the test suite sets 1: every call).
CHECK_EVERY = 64
# inductor settings for a program of few kernels and many small inputs (a sampler's step function): the C++ wrapper
# turns every dynamic size into a tensor on each call and saves little on few kernels; the wrapper's checks of each
# input's size, strides and alignment are redundant where prepare() or a vouched sig guarantees row-major strides
# and CPU kernels load unaligned (figures: docs/speed.md)
SMALL = {"cpp_wrapper": False, "size_asserts": False, "alignment_asserts": False, "scalar_asserts": False}


class Programs:
    """The compiled programs of one runner, by step and specialisation: each call of :meth:`run` goes to its own.
    ``model`` and ``owner`` (the runner, which a step takes as its first argument) are fixed for the table's life."""

    def __init__(self, model: Any, owner: Any) -> None:
        self.model, self.owner = model, owner
        self.compiled: dict[tuple, Program] = {}
        # (step, a caller's sig) → [program, prepare's sig, calls, the static dimensions' sizes]
        self.vouched: dict[tuple, list] = {}

    def run(self, st: Step, args: tuple[Tensor, ...], patches: dict[str, Any] | None = None,
            sig: tuple | None = None, static: tuple[tuple[int, ...], ...] | None = None) -> tuple[Tensor, ...]:
        """``st(owner, *args)`` as the compiled program of the step (its key: the function and every constant,
        :mod:`recdiff.engine.step`) for this specialisation of ``args``, compiled with inductor's ``patches`` over
        :data:`PATCHES` (e.g. :data:`SMALL`). A caller that knows its arguments' specialisation hands it in as ``sig``
        (:meth:`_vouched`) and skips :func:`prepare`'s pass over them; with it, ``static`` may name per argument the
        dimensions that are the owner's constants (slots, cache length, model widths), compiled as fixed sizes
        (fewer sizes to pass, loops of known length; other sizes there are another program)."""
        if sig is not None:
            key = (st, sig, _sizes(args, static) if static else None)
            entry = self.vouched.get(key)
            if entry is None or entry[2] % CHECK_EVERY == 0:
                entry = self._vouched(key, st, args, patches, static)
            entry[2] += 1
            return entry[0](args)
        args, psig = prepare(args)
        key = (st, psig)
        prog = self.compiled.get(key)
        if prog is None:
            prog = self.compiled[key] = Program(st, self.model, self.owner, patches)
        return prog(args)

    def _vouched(self, key: tuple, st: Step, args: tuple[Tensor, ...], patches: dict[str, Any] | None,
                 static: tuple[tuple[int, ...], ...] | None = None) -> list:
        """The ``[program, prepare's signature, calls]`` entry of a caller's own ``sig`` (in ``key``), checked
        against :func:`prepare` (on its first call and every :data:`CHECK_EVERY`-th after): the caller vouches that
        its arguments are contiguous as they are (a batch-1 view's odd stride in a size-1 dimension is never read)
        and that ``sig`` differs wherever prepare's signature would. A caller that breaks this fails here, in one
        line."""
        _, psig = prepare(args)
        entry = self.vouched.get(key)
        if not all(a.is_contiguous() for a in args) or (entry is not None and entry[1] != psig):
            raise RuntimeError(f"{st.name}: arguments other than their caller's signature {key[1]} says "
                               f"(shapes {[tuple(a.shape) for a in args]})")
        if entry is None:
            # a program with static dimensions is its own: an unvouched call of the same step must not get it
            pkey = (st, psig) if static is None else (st, psig, static, key[2])
            prog = self.compiled.get(pkey)
            if prog is None:
                prog = self.compiled[pkey] = Program(st, self.model, self.owner, patches, static)
            entry = self.vouched[key] = [prog, psig, 0]
        return entry


def _sizes(args: tuple[Tensor, ...], static: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """The sizes of ``args``' static dimensions (what a program compiled with them as constants assumes)."""
    return tuple(a.shape[d] for a, dims in zip(args, static, strict=True) for d in dims)
