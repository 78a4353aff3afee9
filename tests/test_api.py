"""The Python API on the CPU: problems tuned by the CLI into a temporary cache, then looked up
and called through autotune_cli.lookup / mm / addmm / bmm (Triton under the interpreter)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import warnings

import pytest
import torch

import autotune_cli
from autotune_cli import api
from autotune_cli.problem import GemmProblem
from autotune_cli.settings import TuneSettings
from autotune_cli.tune.tuner import Tuner

ONE_CONFIG = [{"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 2, "num_warps": 4}]


@pytest.fixture(autouse=True)
def fresh_api():
    api.reset()
    yield
    api.reset()


@pytest.fixture
def space(tmp_path):
    path = tmp_path / "space.json"
    path.write_text(json.dumps(ONE_CONFIG))
    return path


def tune(cli, *args) -> dict:
    code, out, err = cli("mm", "--device", "cpu", "--json", "--workers", "1", *args)
    assert code == 0, err
    return json.loads(out)


def cached_entries(cli) -> dict:
    code, out, _ = cli("cache", "show", "--json")
    assert code == 0
    return json.loads(out)["entries"]


def operand(rows, cols, dtype, transposed=False, seed=0):
    """A [rows, cols] tensor, stored column-major when `transposed`."""
    g = torch.Generator().manual_seed(seed)
    if transposed:
        return torch.randn(cols, rows, generator=g).to(dtype).t()
    return torch.randn(rows, cols, generator=g).to(dtype)


class NoWarnings:
    def __enter__(self):
        self._cm = warnings.catch_warnings(record=True)
        self.caught = self._cm.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        self._cm.__exit__(*exc)
        mine = [w for w in self.caught if issubclass(w.category, api.AutotuneFallbackWarning)]
        assert not mine, [str(w.message) for w in mine]


def fallbacks(caught):
    return [w for w in caught if issubclass(w.category, api.AutotuneFallbackWarning)]


@contextlib.contextmanager
def torch_forbidden(*names):
    """torch.<name> raises inside: a result that still comes back did not come from torch.
    The API forgets its plans on the way in and out, so they are made with the stand-ins."""
    with pytest.MonkeyPatch.context() as patch:
        for name in names:
            def refuse(*args, _name=name, **kwargs):
                raise AssertionError(f"torch.{_name} was called")
            patch.setattr(torch, name, refuse)
        api.reset()
        try:
            yield
        finally:
            api.reset()


# -- import ----------------------------------------------------------------------------------

def test_importing_the_package_and_api_names_imports_no_torch():
    code = ("import sys, autotune_cli; from autotune_cli import lookup, mm, addmm, bmm, dispatch_info;"
            "assert callable(mm) and autotune_cli.mm is mm;"
            "print('IMPORTED', [m for m in ('torch', 'triton') if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "IMPORTED []" in proc.stdout
    with pytest.raises(AttributeError):
        autotune_cli.no_such_name  # noqa: B018


# -- lookup and the aten path ------------------------------------------------------------------

def test_lookup_and_mm_use_the_cached_aten_winner(cli, cache_dir):
    doc = tune(cli, "--m", 64, "--n", 48, "--k", 32, "--templates", "aten")
    entries = cached_entries(cli)
    assert list(entries) == [doc["key"]]
    winner = entries[doc["key"]]["winner"]
    assert winner["uid"] == "aten::mm"

    problem = GemmProblem(op="mm", m=64, n=48, k=32, dtype="float16", device="cpu")
    assert autotune_cli.lookup(problem) == winner
    assert autotune_cli.lookup(problem.to_dict()) == winner
    assert autotune_cli.lookup(m=64, n=48, k=32, dtype="fp16", device="cpu") == winner
    assert autotune_cli.lookup(problem, templates="aten") == winner
    assert autotune_cli.lookup(problem, templates="triton") is None  # no entry tuned that way
    assert autotune_cli.lookup(m=64, n=48, k=32, dtype="bf16", device="cpu") is None
    assert autotune_cli.lookup(m=64, n=48, k=32, layout="nt", device="cpu") is None
    # the key is the tuner's own: problem key @ Tuner.fingerprint for that template selection
    key, _ = api.lookup_entry(problem)
    settings = TuneSettings(device="cpu", templates=("aten",), cache_dir=cache_dir)
    assert key == f"{problem.key()}@{Tuner(settings).fingerprint(problem).digest()}" == doc["key"]

    a, b = operand(64, 32, torch.float16), operand(32, 48, torch.float16, seed=1)
    with NoWarnings():
        info = autotune_cli.dispatch_info(a, b)
        out = autotune_cli.mm(a, b)
        again = autotune_cli.mm(a, b)
    assert (info.uid, info.fallback, info.key) == ("aten::mm", False, doc["key"])
    assert info.problem == problem
    assert torch.equal(out, torch.mm(a, b)) and torch.equal(again, out)

    # a strided operand that is neither row- nor column-major is copied: still this problem
    wide = operand(64, 64, torch.float16)[:, ::2]
    assert wide.stride() == (64, 2)
    with NoWarnings():
        assert autotune_cli.dispatch_info(wide, b).uid == "aten::mm"
        assert torch.equal(autotune_cli.mm(wide, b), torch.mm(wide.contiguous(), b))


def test_a_bad_field_is_named_as_the_caller_wrote_it(cache_dir):
    """The API's errors name its keywords (m, batch, allow_tf32), not the command's flags."""
    from autotune_cli.errors import UserError

    for fields, said in ((dict(m=-1, n=4, k=4), "m must be at least 1, got -1"),
                         (dict(m=4, n=4, k=4, batch=0), "batch must be at least 1, got 0"),
                         (dict(m=4, n=4, k=4, allow_tf32=True), "allow_tf32 only applies to float32")):
        with pytest.raises(UserError) as raised:
            autotune_cli.lookup(**fields, device="cpu")
        assert str(raised.value) == said
    with pytest.raises(UserError, match="^n must be at least 1, got 0$"):
        autotune_cli.lookup({"op": "mm", "m": 4, "n": 0, "k": 4, "device": "cpu"})


def test_fallback_warns_once_per_problem_and_is_correct(cli, cache_dir):
    tune(cli, "--m", 32, "--n", 32, "--k", 32, "--templates", "aten")
    a, b = operand(48, 32, torch.float16), operand(32, 32, torch.float16, seed=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [autotune_cli.mm(a, b) for _ in range(3)]
        # the same problem with other (still row-major) strides: no second warning
        padded = operand(48, 40, torch.float16)[:, :32].copy_(a)
        results.append(autotune_cli.mm(padded, b))
        plans = dict(api.default_dispatcher._mm)
        info = autotune_cli.dispatch_info(a, b)  # finds the call's plan: the keys agree
        assert api.default_dispatcher._mm == plans and len(plans) == 2
    warned = fallbacks(caught)
    assert len(warned) == 1, [str(w.message) for w in warned]
    message = str(warned[0].message)
    assert "mm 48x32x32 float16 nn runs torch.mm" in message and "autotune mm --m 48 --n 32 --k 32" in message
    assert warned[0].filename == __file__  # it points at the caller
    assert info.fallback and info.uid == "torch.mm" and info.problem.m == 48
    for out in results:
        assert torch.equal(out, torch.mm(a, b))

    # the tuned problem in another layout is another problem: it falls back, once
    at = operand(32, 32, torch.float16, transposed=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = autotune_cli.mm(at, b)
        autotune_cli.mm(at, b)
    assert [str(w.message).split(" runs")[0] for w in fallbacks(caught)] == ["autotune: mm 32x32x32 float16 tn"]
    assert torch.equal(out, torch.mm(at, b))

    # a product met at many row counts, none cached (a server's batch sizes): one warning,
    # which says so; each call's own dispatch still names its problem and reason
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for rows in (5, 6, 7, 9):
            autotune_cli.mm(operand(rows, 24, torch.float16), operand(24, 40, torch.float16))
        info = autotune_cli.dispatch_info(operand(7, 24, torch.float16), operand(24, 40, torch.float16))
    (only,) = fallbacks(caught)
    assert "mm 5x40x24 float16 nn runs torch.mm: nothing cached" in str(only.message)
    assert "its other row counts are not warned of" in str(only.message)
    assert info.fallback and info.problem.m == 7 and info.reason.startswith("nothing cached for it")

    # what autotune does not tune: once per kind, torch's numbers
    d = operand(8, 8, torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = autotune_cli.mm(d, d)
        autotune_cli.mm(d, d)
    assert len(fallbacks(caught)) == 1 and "not torch.float64" in str(fallbacks(caught)[0].message)
    assert torch.equal(out, torch.mm(d, d))

    # invalid calls raise torch's own error, without a warning
    with NoWarnings(), pytest.raises(RuntimeError):
        autotune_cli.mm(a, operand(16, 8, torch.float16))


# -- the Triton path -------------------------------------------------------------------------

def test_mm_runs_the_cached_triton_winner(cli, cache_dir, space):
    doc = tune(cli, "--m", 64, "--n", 48, "--k", 64, "--dtype", "float32", "--layout", "nt",
               "--templates", "triton::mm", "--space", space)
    assert doc["winner"]["uid"] == "triton::mm"
    assert autotune_cli.lookup(m=64, n=48, k=64, dtype="float32", layout="nt", device="cpu") == doc["winner"]

    a = operand(64, 64, torch.float32)
    b = operand(64, 48, torch.float32, transposed=True, seed=1)
    assert b.stride() == (1, 64)
    expected = torch.mm(a, b)
    with torch_forbidden("mm", "addmm", "matmul"), NoWarnings():
        info = autotune_cli.dispatch_info(a, b)
        out = autotune_cli.mm(a, b)
        again = autotune_cli.mm(a, b)
    assert (info.uid, info.key, info.fallback) == ("triton::mm", doc["key"], False)
    assert info.params == doc["winner"]["params"]
    assert out.shape == (64, 48) and out.dtype == torch.float32
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    assert torch.equal(again, out)
    assert list((cache_dir / "kernels").glob("autotune_kernel_*.py"))  # built into the cache dir

    # operands that need gradients go to torch: the kernel has no backward
    ag = a.clone().requires_grad_()
    out = autotune_cli.mm(ag, b)
    out.sum().backward()
    assert ag.grad is not None


@pytest.mark.parametrize("order", ["triton first", "switch first"])
def test_triton_imported_before_the_interpreter_switch_runs_torchs_op(cli, cache_dir, space, order):
    """Triton's @jit reads TRITON_INTERPRET at each decoration, its own helpers (tl.cdiv)
    at its import: imported before the switch is set, a winner's kernel would be interpreted
    and call compiled helpers (InterpreterError). The API reads triton's mode, not the
    variable alone: torch's op runs, with why; set first, the winner runs."""
    tune(cli, "--m", 32, "--n", 32, "--k", 32, "--dtype", "float32", "--templates", "triton::mm", "--space", space)
    first, then = "import triton", "os.environ['TRITON_INTERPRET'] = '1'"
    code = "; ".join(["import os, warnings", *((first, then) if order == "triton first" else (then, first)),
                      "import torch, autotune_cli", "warnings.simplefilter('always')",
                      "a = torch.randn(32, 32)", "info = autotune_cli.dispatch_info(a, a)",
                      "torch.testing.assert_close(autotune_cli.mm(a, a), a @ a)", "print(info.uid, info.reason)"])
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**env, "PYTHONPATH": root, "AUTOTUNE_CACHE_DIR": str(cache_dir)})
    assert proc.returncode == 0, proc.stderr
    if order == "triton first":
        assert proc.stdout.startswith("torch.mm its winner triton::mm cannot run here: triton was imported "
                                      "before TRITON_INTERPRET=1 was set"), proc.stdout
        assert "AutotuneFallbackWarning" in proc.stderr
    else:
        assert proc.stdout.strip() == "triton::mm", proc.stdout


def test_addmm_and_bmm_run_their_triton_winners(cli, cache_dir, space):
    add = tune(cli, "--m", 48, "--n", 64, "--k", 32, "--bias", "--dtype", "bfloat16", "--layout", "tn",
               "--templates", "triton::mm", "--space", space)
    bat = tune(cli, "--m", 32, "--n", 32, "--k", 48, "--batch", 3, "--dtype", "float16",
               "--templates", "triton::bmm", "--space", space)
    assert add["winner"]["uid"] == "triton::mm" and bat["winner"]["uid"] == "triton::bmm"

    a = operand(48, 32, torch.bfloat16, transposed=True)
    b = operand(32, 64, torch.bfloat16, seed=1)
    bias = operand(1, 64, torch.bfloat16, seed=2)[0]
    x = torch.randn(3, 32, 48, generator=torch.Generator().manual_seed(3)).half()
    y = torch.randn(3, 48, 32, generator=torch.Generator().manual_seed(4)).half()
    ref_add = (a.double() @ b.double() + bias.double()).float()
    ref_bmm = (x.double() @ y.double()).float()
    info = autotune_cli.dispatch_info(a, b, bias=bias)
    assert (info.op, info.uid, info.key) == ("addmm", "triton::mm", add["key"])
    assert autotune_cli.dispatch_info(x, y).uid == "triton::bmm"
    # lookup takes the bias as the flags and a --from list give it, or as the problem holds it
    fields = dict(m=48, n=64, k=32, dtype="bfloat16", layout="tn", op="addmm", device="cpu")
    assert autotune_cli.lookup(**fields, bias=True) == autotune_cli.lookup(**fields, bias="n") == add["winner"]
    assert autotune_cli.lookup(**fields, bias=True, bias_shape="mn") is None
    for wrong in ({"bias_shape": "mn"}, {"bias": False, "bias_shape": "mn"}):
        with pytest.raises(TypeError, match="bias_shape needs bias=True"):
            autotune_cli.lookup(**fields, **wrong)
    with pytest.raises(TypeError, match="bias_shape must be 'n' or 'mn', got 'x'"):
        autotune_cli.lookup(**fields, bias=True, bias_shape="x")

    with torch_forbidden("mm", "addmm", "bmm", "matmul"), NoWarnings():
        out_add = autotune_cli.addmm(bias, a, b)
        out_row = autotune_cli.addmm(bias[None, :], a, b)  # a [1, n] bias is the same problem
        out_bmm = autotune_cli.bmm(x, y)
    torch.testing.assert_close(out_add.float(), ref_add, rtol=2e-2, atol=5e-2)
    assert torch.equal(out_row, out_add)
    torch.testing.assert_close(out_bmm.float(), ref_bmm, rtol=2e-3, atol=2e-2)
    assert out_bmm.shape == (3, 32, 32) and out_bmm.dtype == torch.float16

    # beta/alpha other than 1, and a bias shape autotune does not tune, go to torch
    torch.testing.assert_close(autotune_cli.addmm(bias, a, b, beta=0), torch.mm(a, b))
    column = operand(48, 1, torch.bfloat16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = autotune_cli.addmm(column, a, b)
    assert len(fallbacks(caught)) == 1 and "bias of shape [48, 1]" in str(fallbacks(caught)[0].message)
    assert torch.equal(out, torch.addmm(column, a, b))


def test_a_dispatcher_reads_its_own_cache_dir(cli, cache_dir, tmp_path):
    tune(cli, "--m", 32, "--n", 32, "--k", 32, "--templates", "aten")
    elsewhere = api.Dispatcher(tmp_path / "empty")
    here = api.Dispatcher(cache_dir)
    a = operand(32, 32, torch.float16)
    assert here.lookup(m=32, n=32, k=32, device="cpu")["uid"] == "aten::mm"
    assert elsewhere.lookup(m=32, n=32, k=32, device="cpu") is None
    with pytest.warns(api.AutotuneFallbackWarning):
        elsewhere.mm(a, a)
    with NoWarnings():
        assert here.dispatch_info(a, a).uid == "aten::mm"
    # a plan is remembered until reset(): a new winner is seen after it
    (tmp_path / "empty").mkdir()
    os.replace(cache_dir / "autotune-cache.json", tmp_path / "empty" / "autotune-cache.json")
    assert elsewhere.dispatch_info(a, a).fallback
    elsewhere.reset()
    assert elsewhere.dispatch_info(a, a).uid == "aten::mm"


# -- outputs with padded rows ------------------------------------------------------------------

def test_alignment_winners_return_outputs_with_padded_rows(cli, cache_dir, space):
    """N = 50 fp16: rows of 100 bytes. The winners return what they were timed on, a [M, N]
    view of rows padded to 16 elements (triton::mm_padded: what Triton specializes) or to the
    winner's PAD_BYTES (aten::mm_aligned; at 16 bytes as Inductor's max-autotune returns it);
    values as torch.mm's."""
    padded = tune(cli, "--m", 32, "--n", 50, "--k", 40, "--templates", "triton::mm_padded", "--space", space)
    aligned = tune(cli, "--m", 32, "--n", 50, "--k", 40, "--bias", "--templates", "aten::mm_aligned")
    assert padded["winner"]["uid"] == "triton::mm_padded" and aligned["winner"]["uid"] == "aten::mm_aligned"

    a, b = operand(32, 40, torch.float16), operand(40, 50, torch.float16, seed=1)
    bias = operand(1, 50, torch.float16, seed=2)[0]
    expected = (a.double() @ b.double()).float()
    with torch_forbidden("mm", "addmm", "matmul"), NoWarnings():
        assert autotune_cli.dispatch_info(a, b).uid == "triton::mm_padded"
        out = autotune_cli.mm(a, b)
        again = autotune_cli.mm(a, b)
    assert out.shape == (32, 50) and out.stride() == (64, 1) and not out.is_contiguous()
    assert again.data_ptr() != out.data_ptr()  # a fresh output each call
    torch.testing.assert_close(out.float(), expected, rtol=1e-2, atol=2e-2)
    assert torch.equal(again, out)

    with NoWarnings():
        info = autotune_cli.dispatch_info(a, b, bias=bias)
        out_add = autotune_cli.addmm(bias, a, b)
    assert (info.uid, info.key, info.fallback) == ("aten::mm_aligned", aligned["key"], False)
    width = aligned["winner"]["params"]["PAD_BYTES"] // 2  # the winner's width, in fp16 elements
    assert out_add.shape == (32, 50) and out_add.stride() == (-(-50 // width) * width, 1)
    torch.testing.assert_close(out_add.float(), expected + bias.float(), rtol=1e-2, atol=2e-2)


def test_threads_calling_one_alignment_winner_get_their_own_buffers(cli, cache_dir):
    """aten::mm_aligned copies misaligned operands into padded buffers built with the kernel:
    two threads calling the same problem at once each get a kernel (and buffers) of their
    own, so neither overwrites the other's operands (one shared kernel gave wrong products
    in about half of 600 such calls)."""
    import threading

    aligned = tune(cli, "--m", 64, "--n", 50, "--k", 77, "--dtype", "float32", "--templates", "aten::mm_aligned")
    assert aligned["winner"]["uid"] == "aten::mm_aligned"
    pairs = [(operand(64, 77, torch.float32, seed=s), operand(77, 50, torch.float32, seed=s + 10)) for s in (1, 2)]
    wrong = []

    def calls(a, b):
        expected = a @ b
        for _ in range(150):
            if not torch.allclose(autotune_cli.mm(a, b), expected, rtol=1e-4, atol=1e-4):
                wrong.append(1)

    with NoWarnings():
        assert autotune_cli.dispatch_info(*pairs[0]).uid == "aten::mm_aligned"
        threads = [threading.Thread(target=calls, args=pair) for pair in pairs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not wrong, f"{len(wrong)} of 300 calls returned another thread's product"


def test_a_kernel_that_keeps_buffers_is_built_per_thread_and_stream():
    """`api.calls.per_caller`: the planning thread's kernel serves its own stream; another
    stream of that thread, and another thread, each get a kernel built for them (once)."""
    import threading

    from autotune_cli.api.calls import per_caller

    stream = {"now": "s0"}
    built, calls = [], []

    def build():
        name = f"k{len(built) + 1}"
        built.append(name)
        return lambda ops: calls.append((name, ops))

    run = per_caller(lambda ops: calls.append(("k0", ops)), build, lambda: stream["now"])
    run(1)
    stream["now"] = "s1"
    run(2)
    run(3)
    stream["now"] = "s0"
    run(4)
    other = threading.Thread(target=run, args=(5,))
    other.start()
    other.join()
    assert calls == [("k0", 1), ("k1", 2), ("k1", 3), ("k0", 4), ("k2", 5)]
    assert built == ["k1", "k2"]


def test_linear_folds_its_input_and_runs_the_addmm_winner(cli, cache_dir, space):
    """autotune_cli.linear(x [2, 8, K], W, bias) is the addmm [16, K] @ W.T (layout nt)
    `autotune model` reads a linear as; its output has x's leading dims."""
    doc = tune(cli, "--m", 16, "--n", 48, "--k", 32, "--layout", "nt", "--bias", "--dtype", "float32",
               "--templates", "triton::mm", "--space", space)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, 32, generator=g)
    w, bias = torch.randn(48, 32, generator=g), torch.randn(48, generator=g)
    with torch_forbidden("mm", "addmm", "matmul"), NoWarnings():
        out = autotune_cli.linear(x, w, bias)
        info = autotune_cli.dispatch_info(x.reshape(16, 32), w.t(), bias=bias)
    assert (info.uid, info.key) == ("triton::mm", doc["key"])
    assert out.shape == (2, 8, 48)
    torch.testing.assert_close(out, torch.nn.functional.linear(x, w, bias), rtol=1e-4, atol=1e-4)


def test_every_fallback_warning_points_at_the_users_line(cli, cache_dir):
    """However deep in the package a warning is raised (a first call through dispatch_info,
    a damaged cache entry read at the first call), it names the caller's file and line."""
    a, b = operand(24, 16, torch.float16), operand(16, 16, torch.float16, seed=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        autotune_cli.dispatch_info(a, b)
    warned = fallbacks(caught)
    assert len(warned) == 1 and (warned[0].filename, warned[0].lineno) == (__file__, line)

    tune(cli, "--m", 32, "--n", 32, "--k", 32, "--templates", "aten")
    path = cache_dir / "autotune-cache.json"
    document = json.loads(path.read_text())
    key = next(iter(document["entries"]))
    document["entries"][key + "x"] = {"problem": "damaged"}
    path.write_text(json.dumps(document))
    api.default_dispatcher.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        autotune_cli.mm(operand(32, 32, torch.float16), b[:, :16].repeat(2, 2))
    warned = fallbacks(caught)
    assert warned and all((w.filename, w.lineno) == (__file__, line) for w in warned), \
        [(str(w.message), w.filename, w.lineno) for w in warned]
