"""templates/launch.py: a Launcher launches the compiled kernel directly once it is known,
and goes JITFunction's way whenever the specialization could differ. Checked with a stand-in
kernel (no GPU here): the direct path's conditions, and the arguments it passes."""

from __future__ import annotations

import pytest
import torch

from autotune_cli.templates import launch as launch_mod
from autotune_cli.templates.launch import Launcher


class Compiled:
    """A CompiledKernel's surface: run(gx, gy, gz, stream, function, metadata, launch
    metadata, enter hook, exit hook, *args)."""

    def __init__(self, calls):
        self.calls = calls
        self.function = "fn-handle"
        self.packed_metadata = "meta"

    def run(self, *call):
        self.calls.append(("direct", call))


class Kernel:
    """A JITFunction's surface: kernel[grid](*args, **options) returns the compiled kernel."""

    def __init__(self, arg_names):
        self.arg_names = arg_names
        self.pre_run_hooks = []
        self.calls = []
        self.compiled = Compiled(self.calls)

    def __getitem__(self, grid):
        def go(*args, **options):
            self.calls.append(("jit", grid, args, options))
            return self.compiled
        return go


class Runtime:
    launch_enter_hook = None
    launch_exit_hook = None


@pytest.fixture
def direct(monkeypatch):
    """Direct launches available, on 'device 0', the stream a number per device."""
    state = {"device": 0}
    runtime = Runtime()
    monkeypatch.setattr(launch_mod, "_direct_launch_support",
                        lambda: (lambda: state["device"], lambda d: 1000 + d, runtime))
    return state, runtime


def tensors(*offsets, dtype=torch.float16):
    """Tensors whose data pointers are `offset` elements past an aligned allocation."""
    base = torch.empty(256, dtype=dtype)
    assert base.data_ptr() % 16 == 0
    return [base[o:o + 8] for o in offsets]


def test_second_launch_goes_direct_with_every_argument(direct):
    kernel = Kernel(["A", "B", "M", "N"])
    launch = Launcher(kernel, num_warps=4, num_stages=3)
    a, b = tensors(0, 8)
    launch((5, 2), a, b, 64, 32)
    launch((5, 2), a, b, 64, 32)
    assert kernel.calls[0] == ("jit", (5, 2), (a, b, 64, 32), {"num_warps": 4, "num_stages": 3})
    kind, call = kernel.calls[1]
    assert kind == "direct"
    assert call[:9] == (5, 2, 1, 1000, "fn-handle", "meta", None, None, None)
    assert call[9:] == (a, b, 64, 32)
    assert len(kernel.calls) == 2


def test_other_scalars_grid_dtype_device_or_misalignment_go_through_jit(direct):
    state, _ = direct
    kernel = Kernel(["A", "B", "M"])
    launch = Launcher(kernel, num_warps=4, num_stages=3)
    a, b = tensors(0, 8)
    launch((4,), a, b, 64)
    kinds = []
    for grid, args in [((4,), (a, b, 65)),                      # another int: another binary
                       ((8,), (a, b, 64)),                      # another grid
                       ((4,), (*tensors(0, 8, dtype=torch.bfloat16), 64)),  # another dtype
                       ((4,), (tensors(1)[0], b, 64))]:         # a pointer 2 bytes off
        before = len(kernel.calls)
        launch(grid, *args)
        kinds.append(kernel.calls[before][0])
    state["device"] = 1  # the binary was loaded for device 0
    launch((4,), a, b, 64)
    kinds.append(kernel.calls[-1][0])
    assert kinds == ["jit"] * 5
    # Each new call was remembered where sound: the same call again goes direct ...
    state["device"] = 0
    launch((4,), a, b, 65)
    assert kernel.calls[-1][0] == "direct"
    # ... but not one compiled for a misaligned pointer.
    launch((4,), tensors(1)[0], b, 64)
    assert kernel.calls[-1][0] == "jit"


def test_launch_hooks_a_tensor_after_a_scalar_or_defaulted_args_keep_the_jit_path(direct):
    _, runtime = direct
    a, b = tensors(0, 8)
    kernel = Kernel(["A", "B", "M"])
    launch = Launcher(kernel, 4, 3)
    launch((1,), a, b, 3)
    runtime.launch_enter_hook = lambda metadata: None  # a profiler's hook must see launches
    launch((1,), a, b, 3)
    assert kernel.calls[-1][0] == "jit"
    runtime.launch_enter_hook = None

    mixed = Kernel(["A", "M", "B"])
    launch = Launcher(mixed, 4, 3)
    launch((1,), a, 3, b)
    launch((1,), a, 3, b)
    assert [c[0] for c in mixed.calls] == ["jit", "jit"]

    defaulted = Kernel(["A", "B", "M", "BLOCK"])  # one argument left to its default
    launch = Launcher(defaulted, 4, 3)
    launch((1,), a, b, 3)
    launch((1,), a, b, 3)
    assert [c[0] for c in defaulted.calls] == ["jit", "jit"]


def test_a_bound_launch_goes_direct_after_the_first_with_its_fixed_arguments(direct):
    kernel = Kernel(["A", "B", "C", "M", "N"])
    launch = Launcher(kernel, num_warps=4, num_stages=3)
    go = launch.bind((5, 2), (64, 32))
    a, b, c = tensors(0, 8, 16)
    go(a, b, c)
    go(b, a, c)  # other tensors, same dtypes and alignment: the same binary
    assert kernel.calls[0] == ("jit", (5, 2), (a, b, c, 64, 32), {"num_warps": 4, "num_stages": 3})
    kind, call = kernel.calls[1]
    assert kind == "direct"
    assert call[:9] == (5, 2, 1, 1000, "fn-handle", "meta", None, None, None)
    assert call[9:] == (b.data_ptr(), a.data_ptr(), c.data_ptr(), 64, 32)  # pointers as ints
    # another binding of the same arguments finds the binary the first one left
    other = launch.bind((5, 2), (64, 32))
    other(a, b, c)
    other(a, b, c)
    assert [c[0] for c in kernel.calls[2:]] == ["direct", "direct"] and len(launch._fast) == 1


def test_a_bound_launch_keeps_the_jit_way_for_misalignment_dtypes_devices_and_hooks(direct):
    state, runtime = direct
    kernel = Kernel(["A", "B", "M"])
    launch = Launcher(kernel, num_warps=4, num_stages=3)
    go = launch.bind((4,), (64,))
    a, b = tensors(0, 8)
    go(a, b)
    kinds = []
    go(tensors(1)[0], b)  # 2 bytes off
    kinds.append(kernel.calls[-1][0])
    # a binding's dtypes are its caller's to keep; another binding of other dtypes does not
    # take the binary the first one learned
    bf16 = launch.bind((4,), (64,))
    bf16(*tensors(0, 8, dtype=torch.bfloat16))
    kinds.append(kernel.calls[-1][0])
    state["device"] = 1  # the binary was loaded for device 0
    go(a, b)
    kinds.append(kernel.calls[-1][0])
    state["device"] = 0
    runtime.launch_enter_hook = lambda metadata: None  # a profiler's hook must see launches
    go(a, b)
    kinds.append(kernel.calls[-1][0])
    runtime.launch_enter_hook = None
    go(a, b)
    kinds.append(kernel.calls[-1][0])
    assert kinds == ["jit", "jit", "jit", "jit", "direct"]
    state["device"] = 1  # learned on its own JIT launch there: direct on device 1 as well
    go(a, b)
    assert kernel.calls[-1][0] == "direct" and kernel.calls[-1][1][3] == 1001


def test_a_bound_launch_without_direct_support_is_always_jit(monkeypatch):
    monkeypatch.setattr(launch_mod, "_direct_launch_support", lambda: None)
    kernel = Kernel(["A", "M"])
    go = Launcher(kernel, 4, 3).bind((1,), (7,))
    (a,) = tensors(0)
    for _ in range(3):
        go(a)
    assert [c[0] for c in kernel.calls] == ["jit"] * 3


class WrappedRun:
    """Triton 3.5/3.6's CudaLauncher: its __call__ works out two scratch buffers and calls
    the C launch with them."""

    def __init__(self, calls, global_scratch_size=0, profile_scratch_size=0):
        self.calls = calls
        self.global_scratch_size, self.profile_scratch_size = global_scratch_size, profile_scratch_size
        self.launch_cooperative_grid, self.launch_pdl = False, True
        self.launch = lambda *call: calls.append(("c", call))
        self.global_scratch_align = self.profile_scratch_align = 1

    def __call__(self, gridX, gridY, gridZ, stream, function, *args):
        global_scratch = profile_scratch = None
        self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid, self.launch_pdl,
                    global_scratch, profile_scratch, *args)


class OtherRun(WrappedRun):
    def __call__(self, gridX, gridY, gridZ, stream, function, metadata, *args):  # another Triton's
        self.calls.append(("wrapper", (gridX, gridY, gridZ, stream, function, metadata, *args)))


def test_a_bound_launch_calls_the_c_launch_past_a_wrapper_that_only_adds_empty_scratch(direct):
    calls = []
    for run, via in [(WrappedRun(calls), "c"), (WrappedRun(calls, global_scratch_size=64), "wrapper"),
                     (WrappedRun(calls, profile_scratch_size=8), "wrapper"), (OtherRun(calls), "wrapper")]:
        if via == "wrapper" and type(run) is WrappedRun:  # scratch needed: the wrapper allocates it
            run.__class__ = type("Scratchy", (WrappedRun,), {"__call__": OtherRun.__call__})
        kernel = Kernel(["A", "M"])
        kernel.compiled.run = run
        go = Launcher(kernel, 4, 3).bind((3,), (7,))
        (a,) = tensors(0)
        go(a)
        go(a)
        kind, call = calls[-1]
        assert kind == via
        if via == "c":
            assert call == (3, 1, 1, 1000, "fn-handle", False, True, None, None, "meta", None, None, None,
                            a.data_ptr(), 7)
        else:
            assert call == (3, 1, 1, 1000, "fn-handle", "meta", None, None, None, a.data_ptr(), 7)


def test_a_bound_launch_passes_tensors_to_a_launcher_that_refuses_int_pointers(direct):
    kernel = Kernel(["A", "M"])

    def strict(*call):
        if isinstance(call[9], int):
            raise TypeError("Pointer argument must have data_ptr method")
        kernel.calls.append(("direct", call))

    kernel.compiled.run = strict
    go = Launcher(kernel, 4, 3).bind((2,), (5,))
    (a,) = tensors(0)
    for _ in range(3):
        go(a)
    assert [c[0] for c in kernel.calls] == ["jit", "direct", "direct"]
    assert kernel.calls[-1][1][9:] == (a, 5)


def test_without_direct_support_every_launch_is_jit(monkeypatch):
    monkeypatch.setattr(launch_mod, "_direct_launch_support", lambda: None)
    kernel = Kernel(["A", "M"])
    launch = Launcher(kernel, 4, 3)
    (a,) = tensors(0)
    for _ in range(3):
        launch((1,), a, 7)
    assert [c[0] for c in kernel.calls] == ["jit"] * 3


def test_the_interpreter_has_no_direct_launch(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert launch_mod._direct_launch_support() is None


def test_a_copier_plans_once_per_source_layout_and_copies_each_right():
    """row_copy.copier: one destination (a padded buffer), sources of two layouts, each
    copied right on every call (Triton's interpreter runs the kernels on CPU tensors)."""
    from conftest import INTERPRETING

    if not INTERPRETING:
        pytest.skip("runs Triton on CPU tensors: needs TRITON_INTERPRET=1")
    from autotune_cli.templates.row_copy import copier

    storage = torch.zeros(6, 24, dtype=torch.float16)
    dst = storage[:, :19]
    copy = copier(dst, owns_padding=True)
    g = torch.Generator().manual_seed(0)
    for _ in range(2):
        rows = torch.randn(6, 19, generator=g).half()
        copy(rows)
        assert torch.equal(dst, rows) and bool((storage[:, 19:] == 0).all())
        cols = torch.randn(19, 6, generator=g).half().t()  # the transpose of a packed matrix
        copy(cols)
        assert torch.equal(dst, cols) and bool((storage[:, 19:] == 0).all())
    with pytest.raises(ValueError, match="must be equal"):
        copy(torch.zeros(6, 18, dtype=torch.float16))


@pytest.mark.gpu
def test_gpu_direct_launches_compute_what_jit_launches_compute():
    """On a GPU: after the first launch the Launcher calls the compiled kernel itself (its
    table has the entry), and every launch, direct or not, writes the right values; a
    misaligned view goes JITFunction's way and is right too."""
    import triton
    import triton.language as tl

    @triton.jit
    def add_one(x, y, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y + offs, tl.load(x + offs, mask=mask) + 1, mask=mask)

    launch = Launcher(add_one, num_warps=4, num_stages=1)
    x = torch.randn(1000, device="cuda")
    for _ in range(3):
        y = torch.empty_like(x)
        launch((triton.cdiv(1000, 256),), x, y, 1000, 256)
        torch.testing.assert_close(y, x + 1)
    assert launch._fast, "no direct launch was remembered"
    y = torch.zeros(1001, device="cuda")
    launch((triton.cdiv(999, 256),), x[1:], y[1:], 999, 256)  # 4 bytes off: not aligned
    torch.testing.assert_close(y[1:1000], x[1:] + 1)
