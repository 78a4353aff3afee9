"""Templates: the registry, the rendered Triton source, and each kernel run for real under
Triton's interpreter against torch for every op and layout."""

import ast

import pytest

from autotune_cli.errors import UserError
from autotune_cli.problem import make_problem
from autotune_cli.templates import all_templates, get_template, register_template, templates_for
from autotune_cli.templates.aten import AtenTemplate
from helpers_kernels import run_kernel

CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2, "num_stages": 1, "num_warps": 4}


def test_builtin_uids():
    uids = {t.uid for t in all_templates()}
    assert {"aten::mm", "aten::addmm", "aten::bmm", "triton::mm", "triton::bmm"} <= uids


def test_duplicate_uid_raises_and_miss_lists_known():
    with pytest.raises(ValueError, match="already registered"):
        register_template(AtenTemplate("mm"))
    with pytest.raises(UserError, match="aten::mm"):
        get_template("nope::mm")


def test_templates_for_op_and_filter():
    bmm = make_problem(m=8, n=8, k=8, batch=2, device="cpu")
    assert [t.uid for t in templates_for(bmm)] == ["aten::bmm", "triton::bmm", "triton::mm_swap_ab"]
    big_bmm = make_problem(m=80, n=8, k=8, batch=2, device="cpu")  # swap-AB only up to M = 64
    assert [t.uid for t in templates_for(big_bmm)] == ["aten::bmm", "triton::bmm"]
    addmm = make_problem(m=8, n=8, k=8, bias="n", device="cpu")
    assert [t.uid for t in templates_for(addmm, ("aten",))] == ["aten::addmm"]
    with pytest.raises(UserError, match="known templates"):
        templates_for(addmm, ("cutlass::mm",))


def test_rendered_source_is_real_python_with_literals():
    problem = make_problem(m=100, n=64, k=40, device="cpu", dtype="bfloat16")
    template = get_template("triton::mm")
    params = template.full_params(problem, CONFIG)
    assert params["EVEN_K"] is False  # 40 % 32
    source = template.render(problem, params)
    ast.parse(source)
    assert "BLOCK_M: tl.constexpr = 32" in source
    assert "a = a.to(tl.float32)" in source  # bf16 upcast under the interpreter
    assert "mask=offs_k" in source  # K is not a multiple of BLOCK_K
    cuda = template.render(problem.with_device("cuda"), params)
    assert "a.to(tl.float32)" not in cuda
    fp32 = make_problem(m=64, n=64, k=64, device="cuda", dtype="float32", allow_tf32=True)
    assert 'input_precision="tf32"' in template.render(fp32, template.full_params(fp32, CONFIG))


def test_template_hash_changes_with_source():
    a, b = get_template("triton::mm"), get_template("aten::mm")
    assert a.source_hash() != b.source_hash() and len(a.source_hash()) == 16


CASES = [
    dict(m=70, n=40, k=50, dtype="float32", layout="nn"),
    dict(m=64, n=48, k=64, dtype="float16", layout="nt"),
    dict(m=33, n=65, k=31, dtype="bfloat16", layout="tn"),
    dict(m=32, n=32, k=96, dtype="float32", layout="tt"),
    dict(m=40, n=72, k=48, dtype="float16", bias="n"),
    dict(m=40, n=40, k=40, dtype="float32", bias="mn", layout="nt"),
    dict(m=24, n=40, k=72, dtype="bfloat16", batch=3, layout="tt"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
@pytest.mark.parametrize("backend", ["triton", "aten"])
def test_kernels_compute_the_product(case, backend, tmp_path):
    problem = make_problem(device="cpu", **case)
    uid = {"aten": f"aten::{problem.op}", "triton": "triton::bmm" if problem.op == "bmm" else "triton::mm"}[backend]
    result = run_kernel(problem, get_template(uid), CONFIG if backend == "triton" else {}, tmp_path)
    assert result.correct, result.reasons
    assert result.discriminating


def test_rendered_kernel_file_is_kept(tmp_path):
    problem = make_problem(m=32, n=32, k=32, device="cpu")
    template = get_template("triton::mm")
    template.build(problem, template.full_params(problem, CONFIG), str(tmp_path))
    files = list(tmp_path.glob("autotune_kernel_*.py"))
    assert len(files) == 1 and "@triton.jit" in files[0].read_text()


@pytest.mark.parametrize("case", [
    dict(m=40, n=32, k=37, dtype="float16", layout="nn"),
    dict(m=33, n=64, k=45, dtype="bfloat16", layout="tt", bias="n"),
    dict(m=20, n=16, k=23, dtype="float16", layout="nt", bias="mn"),
    dict(m=24, n=45, k=32, dtype="float16", layout="nn"),  # N off: B's rows get a pitch
    dict(m=17, n=37, k=29, dtype="bfloat16", layout="tn", bias="n"),  # both
], ids=["nn", "tt-bias", "nt-biasmn", "nn-n", "tn-kn-bias"])
def test_padded_k_template(case, tmp_path):
    problem = make_problem(device="cpu", **case)
    template = get_template("triton::mm_padded")
    assert template.supports(problem)
    params = template.full_params(problem, CONFIG)
    from autotune_cli.templates.triton_mm_padded import padded_k

    assert padded_k(problem) % 8 == 0 and padded_k(problem) >= problem.k
    assert params["EVEN_K"] == (padded_k(problem) % CONFIG["BLOCK_K"] == 0)
    result = run_kernel(problem, template, CONFIG, tmp_path, seed=4)
    assert result.correct, result.reasons
    assert result.discriminating
    # only offered where K or N is misaligned
    assert not template.supports(make_problem(m=8, n=16, k=32, device="cpu"))
    assert template.supports(make_problem(m=8, n=15, k=32, device="cpu"))  # N off


@pytest.mark.parametrize("pad_bytes", [16, 128, 512])
@pytest.mark.parametrize("zero_pad", [0, 1])
@pytest.mark.parametrize("case", [
    dict(m=40, n=32, k=37, dtype="float16", layout="nn"),  # A's rows (K) off
    dict(m=33, n=45, k=32, dtype="bfloat16", layout="nn", bias="n"),  # B's and C's rows (N) off
    dict(m=21, n=19, k=23, dtype="float16", layout="tt", bias="mn"),  # A's (M), B's (K), C's (N)
    dict(m=30, n=16, k=45, dtype="float32", layout="nt"),  # B's rows (K) off
], ids=["nn-k", "nn-n-bias", "tt-all-biasmn", "nt-k-fp32"])
def test_aligned_aten_template(case, zero_pad, pad_bytes, tmp_path):
    from autotune_cli.templates.aten_aligned import misaligned_dims

    problem = make_problem(device="cpu", **case)
    template = get_template("aten::mm_aligned")
    assert template.supports(problem) and misaligned_dims(problem)
    # called twice: the padding must still be zero on the second call
    result = run_kernel(problem, template, {"ZERO_PAD": zero_pad, "PAD_BYTES": pad_bytes}, tmp_path,
                        seed=4, calls=2)
    assert len(result.verdicts) == 2 and result.correct, result.reasons
    assert result.discriminating


def test_aligned_aten_template_offered_only_where_misaligned():
    template = get_template("aten::mm_aligned")
    assert not template.supports(make_problem(m=7, n=16, k=32, device="cpu"))  # M is no leading dim
    assert template.supports(make_problem(m=7, n=16, k=32, layout="tn", device="cpu"))  # now it is
    assert not template.supports(make_problem(m=8, n=15, k=31, batch=2, device="cpu"))  # not bmm
    assert template.supports(make_problem(m=8, n=5, k=4, dtype="float32", device="cpu"))  # 20-byte rows
    with pytest.raises(ValueError, match="ZERO_PAD"):
        template.full_params(make_problem(m=8, n=8, k=7, device="cpu"), {"ZERO_PAD": 2})
    with pytest.raises(ValueError, match="PAD_BYTES"):
        template.full_params(make_problem(m=8, n=8, k=7, device="cpu"), {"PAD_BYTES": 24})
    # an entry tuned before PAD_BYTES existed builds as it did: 16 bytes
    assert template.full_params(make_problem(m=8, n=8, k=7, device="cpu"), {"ZERO_PAD": 1}) == \
        {"ZERO_PAD": 1, "PAD_BYTES": 16}


@pytest.mark.parametrize("dtype,n,pad_bytes,pitch", [
    ("float16", 50257, 16, 50264), ("float16", 50257, 128, 50304), ("float16", 50257, 512, 50432),
    ("float32", 45, 128, 64), ("bfloat16", 45, 512, 256),
])
def test_aligned_aten_pitch_follows_pad_bytes(dtype, n, pad_bytes, pitch):
    """The output's rows (and B's, copied) are N rounded up to PAD_BYTES; the heuristic offers
    every width with both ZERO_PAD forms."""
    from autotune_cli.heuristics.registry import lookup_heuristic

    problem = make_problem(m=8, n=n, k=64, dtype=dtype, device="cpu")
    template = get_template("aten::mm_aligned")
    params = template.full_params(problem, {"ZERO_PAD": 1, "PAD_BYTES": pad_bytes})
    assert template.out_pitch(problem, params) == pitch
    configs = list(lookup_heuristic("aten::mm_aligned", "cpu", "mm").get_configs(problem))
    assert sorted((c["ZERO_PAD"], c["PAD_BYTES"]) for c in configs) == \
        [(z, w) for z in (0, 1) for w in (16, 128, 512)]


def test_aligned_aten_widths_that_land_on_the_same_sizes_are_offered_once():
    """fp16 N = 250 rounds up to 256 at 16, 128 and 512 bytes alike: one width is offered (the
    others would time the same kernel again); K = 100 then still differs (104, 128, 256)."""
    from autotune_cli.heuristics.registry import lookup_heuristic

    heuristic = lookup_heuristic("aten::mm_aligned", "cpu", "mm")
    same = make_problem(m=8, n=250, k=64, dtype="float16", device="cpu")
    assert sorted((c["ZERO_PAD"], c["PAD_BYTES"]) for c in heuristic.get_configs(same)) == [(0, 16), (1, 16)]
    differs = make_problem(m=8, n=250, k=100, dtype="float16", device="cpu")
    assert len(list(heuristic.get_configs(differs))) == 6


@pytest.mark.parametrize("uid,config", [
    ("triton::mm", CONFIG),
    ("triton::mm_splitk", {**CONFIG, "SPLIT_K": 2}),
    ("triton::mm_splitk", {**CONFIG, "SPLIT_K": 2, "FUSED_REDUCE": 1}),
    ("triton::mm_persistent_tma", CONFIG),
])
def test_problems_that_differ_only_in_size_share_one_kernel(uid, config, tmp_path):
    """M, N and K are runtime arguments: problems that render the same text share one
    module (and so one compiled binary); what is baked in (EVEN_K here) still splits them."""
    template = get_template(uid)
    sources = set()
    for m, n in ((32, 64), (96, 128), (1000, 3000)):
        problem = make_problem(m=m, n=n, k=128, dtype="float16", device="cpu")
        params = template.full_params(problem, config)
        sources.add(template.render(problem, params))
        template.build(problem, params, str(tmp_path))
    assert len(sources) == 1
    assert len(list(tmp_path.glob("autotune_kernel_*.py"))) == 1
    odd = make_problem(m=32, n=64, k=100, dtype="float16", device="cpu")
    odd_params = template.full_params(odd, config)
    if "EVEN_K" in odd_params:  # (the TMA template masks K in its descriptors: no flag)
        assert not odd_params["EVEN_K"] and template.render(odd, odd_params) not in sources


WIDE_CASES = [
    ("triton::mm", CONFIG, dict(m=40, n=72, k=48, dtype="float16", bias="n", layout="tn")),
    ("triton::bmm", CONFIG, dict(m=24, n=40, k=72, dtype="bfloat16", batch=3, layout="nt")),
    ("triton::mm", CONFIG, dict(m=33, n=65, k=31, dtype="bfloat16", layout="nt")),
]


@pytest.mark.parametrize("uid,config,case", WIDE_CASES, ids=lambda x: x if isinstance(x, str) else None)
def test_operands_of_2_31_elements_get_64_bit_offsets(uid, config, case, monkeypatch, tmp_path):
    """The tiles are addressed as base pointer plus integer offsets (a step's offset reaches
    K x N in B): 32-bit where every operand holds fewer than 2**31 elements, 64-bit past that.
    The 64-bit form computes the same product (run here on a small problem that takes it)."""
    from autotune_cli.problem import GemmProblem

    template = get_template(uid)
    narrow = make_problem(m=4096, n=4096, k=4096, dtype="bfloat16", device="cpu")
    wide = make_problem(m=65536, n=32768, k=4096, dtype="bfloat16", device="cpu")  # M x N = 2**31
    assert not narrow.wide_offsets and wide.wide_offsets
    assert ".to(tl.int64), offs_k.to(tl.int64)" not in template.render(narrow, template.full_params(narrow, config))
    assert ".to(tl.int64), offs_k.to(tl.int64)" in template.render(wide, template.full_params(wide, config))

    problem = make_problem(device="cpu", **case)
    monkeypatch.setattr(GemmProblem, "wide_offsets", property(lambda self: True))
    assert ".to(tl.int64), offs_k.to(tl.int64)" in template.render(problem, template.full_params(problem, config))
    result = run_kernel(problem, template, config, tmp_path, calls=2)
    assert result.correct, result.reasons
    assert result.discriminating


@pytest.mark.parametrize("layout", ["nn", "tn"])
def test_triton_mm_on_operands_with_wider_rows(layout, tmp_path):
    """Operands that are views into wider buffers (a pitch larger than the size, as a slice
    of a padded weight is): the kernel gives its wrapped-index hints only to packed operands,
    and takes such views to the right product (the runtime branch the packed case skips)."""
    import torch

    from autotune_cli.runner.verify import check, make_operands, poison, reference
    from autotune_cli.templates.base import Operands

    problem = make_problem(m=24, n=45, k=40, dtype="float16", layout=layout, device="cpu")
    template = get_template("triton::mm")
    run = template.build(problem, template.full_params(problem, CONFIG), str(tmp_path))
    ops = make_operands(problem, seed=3, device="cpu")

    def widened(t):  # the same values in a buffer whose rows are 8 elements longer
        stored = t.transpose(0, 1) if t.stride(0) == 1 and t.dim() == 2 and t.stride(1) != 1 else t
        buf = torch.zeros(stored.shape[0], stored.shape[1] + 8, dtype=t.dtype)
        buf[:, :stored.shape[1]] = stored
        view = buf[:, :stored.shape[1]]
        return view.transpose(0, 1) if stored is not t else view

    wide = Operands(a=widened(ops.a), b=widened(ops.b), out=ops.out, bias=None)
    assert wide.b.stride(0) == 45 + 8 and torch.equal(wide.a, ops.a) and torch.equal(wide.b, ops.b)
    ref = reference(problem, ops)
    poison(wide)
    run(wide)
    assert check(problem, wide.out, ref).ok


@pytest.mark.parametrize("uid,config", [
    ("triton::mm_padded", CONFIG),
    ("aten::mm_aligned", {"ZERO_PAD": 0}),
    ("aten::mm_aligned", {"ZERO_PAD": 1}),
    ("aten::mm_aligned", {"ZERO_PAD": 1, "PAD_BYTES": 128}),
])
@pytest.mark.parametrize("case", [
    dict(m=32, n=45, k=40, dtype="float16"),
    dict(m=32, n=50, k=40, dtype="float32", bias="n"),
    dict(m=24, n=45, k=40, dtype="bfloat16", bias="mn", layout="nt"),
], ids=["fp16", "fp32-bias", "bf16-biasmn-nt"])
def test_misaligned_n_is_written_in_place_into_padded_rows(uid, config, case, tmp_path):
    """Where N's rows are off, the alignment templates ask for an output whose rows are
    padded (as Inductor's max-autotune returns it) and write it where it lies: the stride is
    the pitch, the storage is the one handed in, no copy of the output is made."""
    import torch

    from autotune_cli.runner.verify import check, make_operands, poison, reference

    problem = make_problem(device="cpu", **case)
    template = get_template(uid)
    params = template.full_params(problem, config)
    pitch = template.out_pitch(problem, params)
    step = 16 if uid.startswith("triton") else config.get("PAD_BYTES", 16) // problem.dtype_size  # elements or bytes
    assert pitch == -(-problem.n // step) * step and pitch > problem.n
    run = template.build(problem, params, str(tmp_path))
    ops = make_operands(problem, seed=2, device="cpu", pitch=pitch)
    ref = reference(problem, ops)
    rows = ops.out.as_strided((problem.m, pitch), (pitch, 1))  # the storage, padding included
    rows.fill_(float("nan"))
    poison(ops)
    where = ops.out.data_ptr()
    with torch.profiler.profile(record_shapes=True) as prof:
        run(ops)
    assert ops.out.stride() == (pitch, 1) and ops.out.data_ptr() == where
    verdict = check(problem, ops.out, ref)
    assert verdict.ok, verdict.reason
    assert torch.equal(rows[:, :problem.n], ops.out)  # written in place, not replaced
    # no pass copies an [M, N] result into the output (addmm's bias goes in first, by torch)
    shape = [problem.m, problem.n]
    copies = [e for e in prof.events() if e.name in ("aten::copy_", "aten::add")
              and e.input_shapes and list(e.input_shapes[0]) == shape
              and not (problem.op == "addmm" and e.name == "aten::copy_")]
    assert not copies, [(e.name, e.input_shapes) for e in copies]
    if uid == "triton::mm_padded":
        # the stores cover whole padded rows: the padding holds B's zero columns' products
        assert torch.equal(rows[:, problem.n:], torch.zeros_like(rows[:, problem.n:]))


def test_mm_padded_into_a_contiguous_output_stops_at_n(tmp_path):
    """An output without the padded pitch (one a caller made) is written up to N only: stores
    over the padded width would spill into the next row."""
    import torch

    from autotune_cli.runner.verify import check, make_operands, poison, reference

    problem = make_problem(m=32, n=45, k=40, dtype="float16", device="cpu")
    template = get_template("triton::mm_padded")
    run = template.build(problem, template.full_params(problem, CONFIG), str(tmp_path))
    ops = make_operands(problem, seed=2, device="cpu")
    assert ops.out.is_contiguous()
    ref = reference(problem, ops)
    poison(ops)
    run(ops)
    assert check(problem, ops.out, ref).ok
    assert torch.isfinite(ops.out).all()


def test_triton_mm_writes_up_to_n_only_into_any_output(tmp_path):
    """triton::mm asks for no pitch: handed a view of wider rows it leaves the padding alone."""
    import torch

    from autotune_cli.runner.verify import check, make_operands, reference

    problem = make_problem(m=32, n=45, k=40, dtype="float16", device="cpu")
    template = get_template("triton::mm")
    params = template.full_params(problem, CONFIG)
    assert template.out_pitch(problem, params) is None
    run = template.build(problem, params, str(tmp_path))
    ops = make_operands(problem, seed=2, device="cpu", pitch=48)
    rows = ops.out.as_strided((32, 48), (48, 1))
    rows.fill_(float("nan"))
    ref = reference(problem, ops)
    run(ops)
    assert check(problem, ops.out, ref).ok
    assert torch.isnan(rows[:, 45:]).all()


@pytest.mark.parametrize("cols", [1100, 4200], ids=["narrow", "wide"])
@pytest.mark.parametrize("src_t,dst_t", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["rows-to-rows", "columns-to-rows", "rows-to-columns", "columns-to-columns"])
def test_the_row_copy_fills_the_rows_and_zeroes_owned_padding(src_t, dst_t, cols):
    """The alignment templates' GPU copy (templates/row_copy.py), run by the interpreter: an
    operand with an odd pitch, row- or column-major (B = W.t() is copied into row-major
    storage by triton::mm_padded), lands in storage with padded rows or padded columns,
    every element in place: the padding is its own, so the copy goes flat over whole padded
    rows (or columns, for a transposed destination) and writes the padding as zeros, whatever
    it held."""
    import torch

    from autotune_cli.templates.row_copy import copier

    torch.manual_seed(3)
    rows, pad = 5, 4
    src = torch.randn(cols, rows, dtype=torch.float16).t() if src_t else torch.randn(rows, cols, dtype=torch.float16)
    if dst_t:  # [rows, cols] whose columns are contiguous, rows + pad apart
        storage = torch.full((cols, rows + pad), 7.0, dtype=torch.float16)
        dst, padding = storage[:, :rows].t(), storage[:, rows:]
    else:
        storage = torch.full((rows, cols + pad), 7.0, dtype=torch.float16)
        dst, padding = storage[:, :cols], storage[:, cols:]
    copier(dst, owns_padding=True)(src)
    assert torch.equal(dst, src)
    assert torch.count_nonzero(padding) == 0
    with pytest.raises(ValueError):
        copier(dst)(src[:, :-1])



def test_flat_copy_writes_only_its_own_rows():
    """The flat copy writes dst's rows whole (the padding with zeros) and nothing past its
    last row: rows of the storage beyond the view (an M padded past the operand) keep
    whatever they hold."""
    import torch

    from autotune_cli.templates.row_copy import copier

    storage = torch.full((7, 784), 7.0, dtype=torch.float16)
    src = torch.randn(5, 777, dtype=torch.float16)
    copier(storage[:5, :777], owns_padding=True)(src)
    assert torch.equal(storage[:5, :777], src)
    assert torch.count_nonzero(storage[:5, 777:]) == 0
    assert bool((storage[5:] == 7.0).all())



def test_without_owned_padding_the_copy_writes_only_the_view():
    """A view that is not the head of padded storage of its own (columns 7.. of a buffer, or
    the first 700 of 800): only its elements are written, whatever its width."""
    import torch

    from autotune_cli.templates.row_copy import copier

    storage = torch.full((6, 784), 7.0, dtype=torch.float16)
    src = torch.randn(5, 777, dtype=torch.float16)
    copier(storage[:5, 7:])(src)
    assert torch.equal(storage[:5, 7:], src) and bool((storage[:, :7] == 7.0).all())
    wide = torch.full((4, 800), 7.0, dtype=torch.float16)
    copier(wide[:, :700])(src[:4, :700])
    assert bool((wide[:, 700:] == 7.0).all())
    copier(storage[1:6, 7:], owns_padding=True)(src)  # not at a row's start: by row
    assert bool((storage[:, :7] == 7.0).all())


def test_rows_exactly_cols_apart_are_copied_as_one_run(monkeypatch):
    """B of odd (777 rows of 3000) into storage with rows of its own width and K padded:
    source and destination are one contiguous run each and go through `_copy_run` (16-byte
    loads and stores where by row Triton cannot know the rows' starts are aligned); every
    element lands, and the storage's rows past the view keep what they hold."""
    import torch

    from autotune_cli.templates import row_copy

    launched = []

    class Spy:
        def __getitem__(self, grid):
            launched.append(grid)
            return real[grid]

    real = row_copy._copy_run
    monkeypatch.setattr(row_copy._LAUNCH_RUN, "kernel", Spy())  # what the copier launches it through
    storage = torch.full((9, 300), 7.0, dtype=torch.float16)
    src = torch.randn(7, 300, dtype=torch.float16)
    row_copy.copier(storage[:7], owns_padding=True)(src)
    assert launched, "rows exactly cols apart were not copied as one run"
    assert torch.equal(storage[:7], src)
    assert bool((storage[7:] == 7.0).all())
    launched.clear()
    row_copy.copier(storage[:7, :299])(src[:, :299])  # rows 300 apart, 299 wide: by row
    assert not launched and torch.equal(storage[:7, :299], src[:, :299])
