"""The API's bound calls on the CPU (Triton under the interpreter): every winner kind called
again and again through its bound path stays right, B's padded copy is skipped for an
unchanged weight and made again after an in-place write, one tensor passed as both operands
binds right, and the pieces (copy_when_changed, Launcher.bind) keep their rules."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

import autotune_cli
from autotune_cli import api
from autotune_cli.templates.base import copy_when_changed
from conftest import INTERPRETING

needs_interpreter = pytest.mark.skipif(not INTERPRETING, reason="runs Triton on CPU tensors: needs TRITON_INTERPRET=1")
ONE_CONFIG = [{"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 2, "num_warps": 4}]


@pytest.fixture(autouse=True)
def fresh_api():
    api.reset()
    yield
    api.reset()


def tune(cli, tmp_path, *args, space=None) -> dict:
    extra = []
    if space is not None:
        path = tmp_path / f"space{len(list(tmp_path.glob('space*')))}.json"
        path.write_text(json.dumps(space))
        extra = ["--space", path]
    code, out, err = cli("mm", "--device", "cpu", "--json", "--workers", "1", *args, *extra)
    assert code == 0, err
    return json.loads(out)


def operand(rows, cols, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, cols, generator=g).to(dtype)


def close(out, want):
    torch.testing.assert_close(out.float(), want.float(), rtol=2e-2, atol=5e-2)


def product(a, b):
    return (a.double() @ b.double()).to(a.dtype)


@pytest.mark.parametrize("uid", ["aten::mm_aligned", pytest.param("triton::mm_padded", marks=needs_interpreter)])
def test_a_padded_winner_skips_the_copy_of_an_unchanged_weight_and_sees_an_in_place_write(cli, cache_dir, tmp_path,
                                                                                          uid):
    """N = 50 fp16: B is copied into rows padded to 16 bytes. With B an nn.Parameter the copy
    is made on the calls that need it: a write torch does not see (through .data) is not
    seen (the copy was skipped), an in-place write torch sees is, and so is a new weight at
    another address; reset() forgets the copy."""
    space = ONE_CONFIG if uid == "triton::mm_padded" else None
    doc = tune(cli, tmp_path, "--m", 32, "--n", 50, "--k", 40, "--templates", uid, space=space)
    assert doc["winner"]["uid"] == uid
    a = operand(32, 40)
    w = torch.nn.Parameter(operand(40, 50, seed=1), requires_grad=False)
    assert autotune_cli.dispatch_info(a, w).uid == uid
    for _ in range(3):  # the plain first call, the bound call that copies, one that skips
        close(autotune_cli.mm(a, w), product(a, w))
    before = product(a, w)
    w.data.mul_(2)  # torch does not count this write: the copy is not made again
    close(autotune_cli.mm(a, w), before)
    with torch.no_grad():
        w.mul_(3)  # counted: the weight is copied again
    close(autotune_cli.mm(a, w), product(a, w))
    close(autotune_cli.mm(a, w), product(a, w))
    w.requires_grad_(False).copy_(operand(40, 50, seed=3))
    close(autotune_cli.mm(a, w), product(a, w))
    other = torch.nn.Parameter(operand(40, 50, seed=4), requires_grad=False)  # another weight, same layout
    close(autotune_cli.mm(a, other), product(a, other))
    close(autotune_cli.mm(a, w), product(a, w))
    w.data.add_(1)
    api.reset()
    close(autotune_cli.mm(a, w), product(a, w))


def test_a_plain_tensor_b_is_copied_on_every_call(cli, cache_dir, tmp_path):
    """Only parameters are remembered: an activation refilled where torch does not see it
    (here through .data) is copied again."""
    doc = tune(cli, tmp_path, "--m", 32, "--n", 50, "--k", 40, "--templates", "aten::mm_aligned")
    assert doc["winner"]["uid"] == "aten::mm_aligned"
    a, b = operand(32, 40), operand(40, 50, seed=1)
    assert autotune_cli.dispatch_info(a, b).uid == "aten::mm_aligned"  # the padded winner runs
    previous = None
    for step in range(4):
        b.data.copy_(operand(40, 50, seed=10 + step))
        out = autotune_cli.mm(a, b)
        # a B copy kept from the last call would give the last call's product
        torch.testing.assert_close(out.float(), product(a, b).float(), rtol=2e-2, atol=5e-2)
        if previous is not None:
            assert not torch.allclose(out.float(), previous, rtol=2e-2, atol=5e-2)
        previous = out.float().clone()


def test_linear_with_a_parameter_weight_sees_an_optimizer_like_update(cli, cache_dir, tmp_path):
    """linear(x, W): B is W.T, a view of the parameter; K = 44 fp16 misaligns both operands.
    An update as an optimizer makes it (in place, without grad) is seen on the next call."""
    doc = tune(cli, tmp_path, "--m", 32, "--n", 50, "--k", 44, "--layout", "nt", "--bias",
               "--templates", "aten::mm_aligned")
    assert doc["winner"]["uid"] == "aten::mm_aligned"
    layer = torch.nn.Linear(44, 50).half()
    x = operand(32, 44, seed=5)
    with torch.no_grad():
        for step in range(4):
            want = (x.double() @ layer.weight.double().t() + layer.bias.double()).half()
            close(autotune_cli.linear(x, layer.weight, layer.bias), want)
            if step % 2:
                layer.weight.add_(0.5)
    with torch.no_grad():
        info = autotune_cli.dispatch_info(x, layer.weight.t(), bias=layer.bias)
    assert (info.uid, info.key) == ("aten::mm_aligned", doc["key"])
    # under grad mode the weight needs gradients: the call, and so dispatch_info, is torch's
    info = autotune_cli.dispatch_info(x, layer.weight.t(), bias=layer.bias)
    assert (info.uid, info.fallback) == ("torch.addmm", True) and info.reason.startswith("needs gradients")


@needs_interpreter
def test_one_tensor_as_both_operands_binds_each_to_its_own_place(cli, cache_dir, tmp_path):
    """mm(x, x) first: the bound launch must not take B for A on a later mm(x, y)."""
    tune(cli, tmp_path, "--m", 32, "--n", 32, "--k", 32, "--dtype", "float32", "--templates", "triton::mm",
         space=ONE_CONFIG)
    x, y = operand(32, 32, torch.float32), operand(32, 32, torch.float32, seed=1)
    assert autotune_cli.dispatch_info(x, x).uid == "triton::mm"
    for a, b in [(x, x), (x, y), (y, x), (x, y)]:
        close(autotune_cli.mm(a, b), product(a, b))


@needs_interpreter
@pytest.mark.parametrize("extra", [{}, {"FUSED_REDUCE": 1}, {"ATOMIC_ADD": 1}])
def test_split_k_kernels_stay_right_through_their_bound_launches(tmp_path, extra):
    """triton::mm_splitk's bind (two launches, the fused one, the atomic one with its
    zeroed workspace): called on new operands of the sample's layout, right every time."""
    from autotune_cli.problem import make_problem
    from autotune_cli.templates import get_template
    from autotune_cli.templates.base import Operands, bound, empty_out

    template = get_template("triton::mm_splitk")
    problem = make_problem(m=16, n=32, k=256, dtype="float32", bias="n", op="addmm", device="cpu")
    config = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "GROUP_M": 1, "num_stages": 1, "num_warps": 4,
              "SPLIT_K": 4, **extra}
    params = template.full_params(problem, config)
    run = template.build(problem, params, str(tmp_path))
    bias = operand(1, 32, torch.float32, seed=9)[0]

    def operands(seed):
        return (operand(16, 256, torch.float32, seed=seed), operand(256, 32, torch.float32, seed=seed + 5),
                empty_out(problem, None, torch.float32, "cpu"))

    a, b, out = operands(0)
    assert run.bind(Operands(a, b, out, bias)) is not None  # its own bound launch, not an Operands per call
    go = bound(run, Operands(a, b, out, bias))
    for seed in range(1, 4):
        a, b, out = operands(seed)
        go(a, b, out, bias)
        close(out, product(a, b) + bias)


@needs_interpreter
def test_the_split_k_winner_through_the_api(cli, cache_dir, tmp_path):
    doc = tune(cli, tmp_path, "--m", 16, "--n", 32, "--k", 1024, "--dtype", "float32", "--bias",
               "--templates", "triton::mm_splitk")
    assert doc["winner"]["uid"] == "triton::mm_splitk"
    bias = operand(1, 32, torch.float32, seed=9)[0]
    for seed in range(3):
        a, b = operand(16, 1024, torch.float32, seed=seed), operand(1024, 32, torch.float32, seed=seed + 5)
        close(autotune_cli.addmm(bias, a, b), product(a, b) + bias)


# -- the pieces ----------------------------------------------------------------------------------

def test_bound_runs_a_plain_callable_with_an_operands_per_call():
    """A plugin's build may return a plain function: bound() calls it with the call's tensors."""
    from autotune_cli.templates.base import Operands, bound

    seen = []
    a, b, out = operand(4, 4), operand(4, 4, seed=1), operand(4, 4, seed=2)
    go = bound(seen.append, Operands(a, b, out))
    go(b, a, out, None)
    (ops,) = seen
    assert ops.a is b and ops.b is a and ops.out is out and ops.bias is None


def test_copy_when_changed_remembers_parameters_only_and_never_while_capturing():
    copies = []
    capturing = {"now": False}
    copy = copy_when_changed(copies.append, lambda: capturing["now"])
    w = torch.nn.Parameter(torch.zeros(4, 6), requires_grad=False)
    copy(w)
    copy(w)
    copy(w.t().t())  # a view of the same weight, same address and version
    assert len(copies) == 1
    capturing["now"] = True  # a CUDA graph's replay must copy: every captured call does
    copy(w)
    copy(w)
    capturing["now"] = False
    assert len(copies) == 3
    copy(w)
    copy(w)
    assert len(copies) == 4
    with torch.no_grad():
        w[0, 0] = 1.0  # an in-place write bumps the version of the weight and its views
    copy(w.t().t())
    copy(w)
    assert len(copies) == 5
    plain = torch.zeros(4, 6)
    copy(plain)
    copy(plain)
    assert len(copies) == 7
    with torch.inference_mode():
        frozen = torch.nn.Parameter(torch.zeros(4, 6), requires_grad=False)
    copy(frozen)
    copy(frozen)
    assert len(copies) == 9


def test_copy_when_changed_does_not_take_a_new_weight_at_a_freed_address_for_the_old():
    copies = []
    copy = copy_when_changed(copies.append, lambda: False)
    w = torch.nn.Parameter(torch.zeros(64, 64), requires_grad=False)
    copy(w)
    address = w.data_ptr()
    del w
    again = torch.nn.Parameter(torch.ones(64, 64), requires_grad=False)  # may reuse the memory
    copy(again)
    assert len(copies) == 2, (address, again.data_ptr())


# -- on a GPU: the direct launches ---------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("uid,m,n,k", [("triton::mm", 128, 256, 128), ("aten::mm_aligned", 200, 1001, 777),
                                       ("triton::mm_padded", 200, 1001, 777), ("triton::mm_splitk", 16, 64, 4096),
                                       ("triton::gemv", 8, 4096, 4096)])
def test_gpu_bound_calls_stay_right_and_see_weight_updates(cli, cache_dir, tmp_path, uid, m, n, k):
    """Each kind tuned on the GPU, then called through its bound path (direct launches after
    the first call) on fresh activations, with an nn.Parameter weight updated in place
    between calls: every product right."""
    space = []
    if uid in ("triton::mm", "triton::mm_padded"):  # one config: the launch path is under test
        (tmp_path / "one.json").write_text(json.dumps([{**ONE_CONFIG[0], "BLOCK_M": 64, "BLOCK_N": 64}]))
        space = ["--space", tmp_path / "one.json"]
    code, out, err = cli("mm", "--device", "cuda", "--json", "--m", m, "--n", n, "--k", k, "--dtype", "float16",
                         "--templates", uid, *space)
    assert code == 0, err
    assert json.loads(out)["winner"]["uid"] == uid
    g = torch.Generator(device="cpu").manual_seed(0)
    w = torch.nn.Parameter(torch.randn(k, n, generator=g).half().cuda(), requires_grad=False)
    assert autotune_cli.dispatch_info(torch.empty(m, k, dtype=torch.float16, device="cuda"), w).uid == uid
    for step in range(12):
        a = torch.randn(m, k, generator=g).half().cuda()
        got = autotune_cli.mm(a, w)
        want = (a.double() @ w.double())
        torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=0.15)
        if step % 3 == 2:
            with torch.no_grad():
                w.mul_(-1)
    torch.cuda.synchronize()


@pytest.mark.parametrize("uid", ["aten::mm_aligned", pytest.param("triton::mm_padded", marks=needs_interpreter)])
def test_an_output_with_padded_rows_is_allocated_whole_only_where_the_kernel_writes_the_padding(cli, cache_dir,
                                                                                                tmp_path, uid):
    """triton::mm_padded stores whole padded rows (the last one's padding too); aten::mm_aligned
    without ZERO_PAD writes only [M, N], so its output is one allocation without the last
    row's padding. Values as torch.mm's either way."""
    space = ONE_CONFIG if uid == "triton::mm_padded" else None
    doc = tune(cli, tmp_path, "--m", 32, "--n", 50, "--k", 40, "--templates", uid, space=space)
    a, b = operand(32, 40), operand(40, 50, seed=1)
    out = autotune_cli.mm(a, b)
    pitch = out.stride(0)
    assert pitch > 50 and out.stride(1) == 1
    whole = uid == "triton::mm_padded" or doc["winner"]["params"]["ZERO_PAD"] == 1
    assert out.untyped_storage().nbytes() // 2 == (32 * pitch if whole else 31 * pitch + 50)
    close(autotune_cli.mm(a, b), product(a, b))


def test_out_allocator_leaves_out_the_last_rows_padding_only_when_asked():
    from autotune_cli.templates.base import out_allocator

    whole = out_allocator((3, 5), 8)(torch.float16, torch.device("cpu"))
    short = out_allocator((3, 5), 8, whole_rows=False)(torch.float16, torch.device("cpu"))
    batched = out_allocator((2, 3, 5), 8, whole_rows=False)(torch.float16, torch.device("cpu"))
    assert whole.stride() == short.stride() == (8, 1) and batched.stride() == (24, 8, 1)
    assert whole.untyped_storage().nbytes() // 2 == 24 and short.untyped_storage().nbytes() // 2 == 21
    assert batched.untyped_storage().nbytes() // 2 == 24 + 21


def test_the_api_runs_an_aligned_winner_call_after_call_into_the_planned_layout(cli, cache_dir, tmp_path):
    """An aten::mm_aligned winner (whichever ZERO_PAD and width the tune picked) called again
    and again (the first call plain, then bound): right for fresh activations and a weight
    updated in place, every output with the winner's pitch."""
    from autotune_cli.templates import get_template

    doc = tune(cli, tmp_path, "--m", 32, "--n", 50, "--k", 44, "--templates", "aten::mm_aligned")
    assert doc["winner"]["uid"] == "aten::mm_aligned"
    w = torch.nn.Parameter(operand(44, 50, seed=1), requires_grad=False)
    pitch = get_template("aten::mm_aligned").out_pitch(api.dispatch_info(operand(32, 44), w).problem,
                                                        doc["winner"]["params"])
    layouts = set()
    for step in range(5):
        a = operand(32, 44, seed=10 + step)
        out = autotune_cli.mm(a, w)
        close(out, product(a, w))
        layouts.add((out.stride(), out.untyped_storage().nbytes()))
        if step == 2:
            with torch.no_grad():
                w.mul_(-1)
    assert len(layouts) == 1 and next(iter(layouts))[0] == (pitch, 1)


@needs_interpreter
def test_a_tma_winner_takes_views_off_its_alignment_as_torch_does(cli, cache_dir, tmp_path):
    """A persistent TMA winner needs 16-byte aligned bases and row strides: a view whose data
    starts off that boundary runs torch's op, and one whose rows overlap or are pitched off it
    is copied first; both give torch's values, none raises."""
    space = [{"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 8, "num_stages": 1, "num_warps": 4}]
    doc = tune(cli, tmp_path, "--m", 32, "--n", 16, "--k", 48, "--dtype", "float32",
               "--templates", "triton::mm_persistent_tma", space=space)
    assert doc["winner"]["uid"] == "triton::mm_persistent_tma"
    b = operand(48, 16, torch.float32, seed=1)
    offset = operand(1, 1 + 32 * 48, torch.float32, seed=2)[0, 1:].view(32, 48)  # base 4 bytes off
    overlapping = operand(1, 80, torch.float32, seed=3)[0].as_strided((32, 48), (1, 1))
    pitched = operand(32, 50, torch.float32, seed=4)[:, :48]  # rows of 200 bytes
    assert api.dispatch_info(offset, b).reason == "a view whose data starts off a 16-byte boundary"
    for a in (overlapping, pitched):
        assert api.dispatch_info(a, b).uid == "triton::mm_persistent_tma"
    for a in (offset, overlapping, pitched):
        close(autotune_cli.mm(a, b), product(a, b))


@needs_interpreter
def test_a_bias_off_its_alignment_runs_torchs_addmm(cli, cache_dir, tmp_path):
    """A Triton winner's launch is bound to 16-byte aligned addresses: a bias sliced 4 bytes
    off that boundary (a packed bias's part) runs torch's addmm, with its values."""
    doc = tune(cli, tmp_path, "--m", 32, "--n", 16, "--k", 48, "--dtype", "float32", "--bias",
               "--templates", "triton::mm", space=ONE_CONFIG)
    assert doc["winner"]["uid"] == "triton::mm"
    a, b = operand(32, 48, torch.float32, seed=1), operand(48, 16, torch.float32, seed=2)
    packed = operand(1, 17, torch.float32, seed=3)[0]
    aligned, off = packed[:16], packed[1:]
    assert api.dispatch_info(a, b, aligned).uid == "triton::mm"
    assert api.dispatch_info(a, b, off).reason == "a view whose data starts off a 16-byte boundary"
    for bias in (aligned, off, aligned):
        close(autotune_cli.addmm(bias, a, b), torch.addmm(bias, a, b))


def test_a_cache_that_cannot_be_read_warns_once_and_leaves_torch_to_run(tmp_path, monkeypatch):
    """A file where the cache folder should be: the API warns (once) and runs torch's op, as
    with nothing cached, instead of raising the system's error."""
    folder = tmp_path / "not-a-folder"
    folder.write_text("")
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(folder))
    api.reset()
    a = operand(8, 8, torch.float32)
    with pytest.warns(autotune_cli.AutotuneFallbackWarning) as said:
        torch.testing.assert_close(autotune_cli.mm(a, a), a @ a)
        torch.testing.assert_close(autotune_cli.bmm(a[None], a[None]), a[None] @ a[None])
    unreadable = [w for w in said if "cannot read the cache" in str(w.message)]
    assert len(unreadable) == 1 and "Not a directory" in str(unreadable[0].message)
    api.reset()


def test_linear_of_a_vector_weight_and_a_bad_tune_value_are_torchs_answers():
    empty = torch.empty(0, 48)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an empty matmul is torch's, with nothing to warn of
        assert autotune_cli.mm(empty, operand(48, 16, torch.float32)).shape == (0, 16)
    x, w = operand(4, 48, torch.float32), operand(1, 48, torch.float32)[0]
    torch.testing.assert_close(autotune_cli.linear(x, w), torch.nn.functional.linear(x, w))
    torch.testing.assert_close(autotune_cli.linear(x[0], w[None]), torch.nn.functional.linear(x[0], w[None]))
    with pytest.raises(TypeError, match="tune takes None, True, False or a TuneSettings"):
        autotune_cli.compile(torch.nn.Linear(4, 4), tune="yes")
    with pytest.raises(TypeError, match="routes takes a list"):  # at the call, not at the first forward
        autotune_cli.compile(torch.nn.Linear(4, 4), routes=())


def test_a_view_is_past_32_bit_offsets_by_its_matrix_span_not_its_problems_sizes():
    """The rule (api/problems.wide_view), on fake tensors with real sizes and strides: an
    operand (A, B or the bias) whose matrix spans 2**31 elements or more, past its dense
    size (a wide row pitch, A's or a transposed B's), is named; a dense or slightly pitched
    one, an operand the call copies, and a huge batch stride (64-bit in every kernel) are not."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from autotune_cli.api.problems import Adapt, problem_of, wide_view

    pitch = 2**26 + 2**22  # 16-byte aligned in float16, < 2**31: passed to the kernel uncopied
    with FakeTensorMode():
        def view(shape, strides):
            return torch.empty_strided(shape, strides, dtype=torch.float16)

        dense, b = view((32, 32), (32, 1)), view((32, 32), (32, 1))
        cases = {
            "A": (view((32, 32), (pitch, 1)), b, None),  # 31 rows of `pitch`: 2.2e9 elements
            "B": (dense, view((32, 32), (1, pitch)), None),  # a transposed B of long columns
            "the bias": (dense, b, view((32, 32), (pitch, 1))),
        }
        for name, (a, b_, bias) in cases.items():
            problem, how = problem_of("addmm" if bias is not None else "mm", a, b_, bias, tf32=False)
            assert not (how.copy_a or how.copy_b) and not problem.wide_offsets
            said = wide_view(problem, how, a, b_, bias)
            assert said.startswith(f"{name} spans {31 * pitch + 32:,} elements") and "past 32-bit" in said, said
            assert wide_view(problem, Adapt(copy_a=True, copy_b=True), a, b_, None) == ""  # copied: dense
        problem, how = problem_of("mm", view((32, 32), (4096, 1)), b, None, tf32=False)
        assert wide_view(problem, how, view((32, 32), (4096, 1)), b, None) == ""
        batch = view((2**17, 32, 32), (2**15, 32, 1))  # 2**32 elements over the batch, 1024 a matrix
        problem, how = problem_of("bmm", batch, batch, None, tf32=False)
        assert wide_view(problem, how, batch, batch, None) == ""


@needs_interpreter
def test_a_view_past_32_bit_offsets_runs_torchs_op(cli, cache_dir, tmp_path, monkeypatch):
    """A Triton winner's offsets are sized for its problem's dense operands: a view whose
    rows are far apart (a pitch past the row, taken uncopied) spanning INDEX_LIMIT elements
    would be read through wrapped offsets (rows of another part of memory), so it runs
    torch's op, said in dispatch_info and warned about, eagerly and where a compile routes
    it (the fake tensors' strides). The limit is lowered here: 2**31 elements are 4 GiB."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from autotune_cli.api import problems

    doc = tune(cli, tmp_path, "--m", 32, "--n", 32, "--k", 32, "--templates", "triton::mm", space=ONE_CONFIG)
    assert doc["winner"]["uid"] == "triton::mm"
    a = operand(32, 48, seed=1)[:, :32]  # rows 96 bytes apart: a pitched view, not copied
    b = operand(32, 32, seed=2)
    assert api.dispatch_info(a, b).uid == "triton::mm"  # 1,520 elements: well within
    monkeypatch.setattr(problems, "INDEX_LIMIT", 1500)
    api.reset()
    with pytest.warns(autotune_cli.AutotuneFallbackWarning, match="A spans 1,520 elements"):
        info = api.dispatch_info(a, b)
    assert (info.uid, info.fallback) == ("torch.mm", True) and "sized its offsets for dense" in info.reason
    close(autotune_cli.mm(a, b), product(a, b))
    assert api.dispatch_info(a.contiguous(), b).uid == "triton::mm"  # the dense problem stays served
    with FakeTensorMode():  # what a compile plans its routes with (routing/backend.py)
        fake_a = torch.empty_strided((32, 32), (48, 1), dtype=torch.float16)
        _, routed, built = api.default_dispatcher.route(fake_a, torch.empty(32, 32, dtype=torch.float16))
    assert routed.fallback and built is None and routed.reason == info.reason


@needs_interpreter
def test_sparse_operands_and_negated_views_run_torchs_op(cli, cache_dir, tmp_path):
    """A sparse operand (COO, CSR) has no memory a kernel can read through strides, and a
    view with its neg bit reads as the negatives of its memory: both run torch's op, said
    in dispatch_info, and never share the plan of a dense tensor of their shape and strides
    (a COO's (0, 0) strides are a broadcast dense tensor's too) nor break it."""
    doc = tune(cli, tmp_path, "--m", 32, "--n", 32, "--k", 32, "--dtype", "float32", "--bias",
               "--templates", "triton::mm", space=ONE_CONFIG)
    tune(cli, tmp_path, "--m", 32, "--n", 32, "--k", 32, "--dtype", "float32", "--templates", "triton::mm",
         space=ONE_CONFIG)
    assert doc["winner"]["uid"] == "triton::mm"
    a, b, bias = operand(32, 32, torch.float32, 1), operand(32, 32, torch.float32, 2), operand(1, 32, torch.float32)[0]
    broadcast = torch.ones(()).expand(32, 32)  # strides (0, 0), as a COO tensor's read
    assert api.dispatch_info(broadcast, b).uid == "triton::mm"
    sparse = "is not tuned (dense, strided tensors only)"
    negated = "a view with its neg or conj bit set"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's beta warning for CSR, ours once per reason
        for x, y, why in ((a.to_sparse(), b, sparse), (a.to_sparse_csr(), b, sparse),
                          (torch._neg_view(a), b, negated), (a, torch._neg_view(b), negated)):
            info = api.dispatch_info(x, y)
            assert (info.uid, info.fallback) == ("torch.mm", True) and why in info.reason, info
            close(autotune_cli.mm(x, y), torch.mm(x, y))
        info = api.dispatch_info(a, b, torch._neg_view(bias))
        assert info.uid == "torch.addmm" and negated in info.reason
        close(autotune_cli.addmm(torch._neg_view(bias), a, b), torch.addmm(torch._neg_view(bias), a, b))
        close(autotune_cli.linear(a, b.to_sparse()), torch.nn.functional.linear(a, b.to_sparse()))
    for x in (a, broadcast):  # the dense plans of these shapes and strides are untouched
        assert api.dispatch_info(x, b).uid == "triton::mm"
        close(autotune_cli.mm(x, b), product(x, b))
    assert api.dispatch_info(a, b, bias).uid == "triton::mm"
