"""Files and options a hostile or careless user hands the tool: each is refused in one line
(a UserError: exit 2 from the command), at once, with nothing changed. The GPU facts memo
(gpu_memo.py), a .pt2's symbolic sizes (model/export_expr.py), a --from list
(shapes_file.py), and --gpus, --timeout and a cache folder that cannot be written."""

import json
import os
import re
import threading
import zipfile

import pytest
import torch

from autotune_cli.hardware import cuda_probe, device, gpu_memo
from autotune_cli.errors import UserError
from autotune_cli.model.shapes_file import read_problems

from test_cuda_probe import H200, FakeDriver
from test_gpu_memo import fake_host

H100 = {"name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "capability": "9.0", "index": 0,
        "smem_per_block": 232448, "l2_bytes": 52428800, "total_memory": 85_000_000_000}


def finishes(call, *args):
    """call(*args) run on a thread: (True, its result or exception) once it returns, or
    (False, None) if it is still running after a minute (it blocks: on a FIFO, say)."""
    box = []

    def run():
        try:
            box.append(call(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(60)
    return (not thread.is_alive()), (box[0] if box else None)


def hostile(path, kind):
    """Put at `path` what a hostile user would: a FIFO, a link to /dev/zero or
    /dev/urandom, or JSON nested 100,000 deep."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind in ("zero", "urandom"):
        os.symlink(f"/dev/{kind}", path)
    else:
        path.write_text("[" * 100_000 + "]" * 100_000)


# ---- the GPU facts memo ---------------------------------------------------------------

@pytest.fixture
def gpu_host(tmp_path, monkeypatch):
    """A host with one H200 as the kernel module and the driver library show it."""
    proc, dev = fake_host(tmp_path / "host")
    monkeypatch.setattr(gpu_memo, "PROC", proc)
    monkeypatch.setattr(gpu_memo, "DEV", dev)
    monkeypatch.setattr(cuda_probe, "torch_cuda_version", lambda: "12.8")
    monkeypatch.setattr(cuda_probe, "_load_driver", lambda: FakeDriver([H200]))
    for name in gpu_memo.VISIBILITY_ENV:
        monkeypatch.delenv(name, raising=False)
    device._driver_report.cache_clear()
    device._remembered_report.cache_clear()
    yield tmp_path / "cache"
    device._driver_report.cache_clear()
    device._remembered_report.cache_clear()


@pytest.mark.parametrize("kind", ["fifo", "zero", "deep"])
def test_a_hostile_memo_is_as_none(gpu_host, kind):
    gpu_host.mkdir()
    hostile(gpu_host / gpu_memo.MEMO_FILE, kind)
    done, found = finishes(device.probe_device, "cuda", 0, "driver", gpu_host)
    assert done, "reading the memo blocked"
    assert not isinstance(found, BaseException), repr(found)
    assert found.name == "NVIDIA H200" and found.sm_count == 132  # asked of the driver
    assert os.path.lexists(gpu_host / gpu_memo.MEMO_FILE)


def crafted_memo(folder, devices, runtime="12.8", driver="12080"):
    folder.mkdir(exist_ok=True)
    memo = {gpu_memo.gpu_signature(): {"devices": devices, "driver": driver, "runtime": runtime}}
    (folder / gpu_memo.MEMO_FILE).write_text(json.dumps(memo))


def test_a_crafted_memo_does_not_stand_for_the_devices(gpu_host):
    crafted_memo(gpu_host, [H100])  # the host's module lists an H200
    assert device.probe_device("cuda", remembered_in=gpu_host).name == "NVIDIA H200"
    device._remembered_report.cache_clear()
    crafted_memo(gpu_host, [{**H100, "name": "NVIDIA H200"}] * 2)  # one GPU listed, two claimed
    assert device.cuda_device_count(gpu_host) == 1


def test_a_memo_does_not_make_a_gpu_where_torch_has_none(gpu_host, monkeypatch):
    # torch built without CUDA (as on a CPU-only host): whatever a memo says, no GPU
    monkeypatch.setattr(cuda_probe, "torch_cuda_version", lambda: None)
    crafted_memo(gpu_host, [H100], runtime="None", driver="12080")
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match="no CUDA GPU is visible"):
        device.probe_device("cuda", remembered_in=gpu_host)


# ---- a .pt2's symbolic sizes ----------------------------------------------------------

S = "Symbol('s77', positive=True, integer=True)"


def power(base, exponent):
    return f"Pow({base}, Integer({exponent}))"


@pytest.fixture(scope="module")
def dynamic_archive(tmp_path_factory):
    import torch

    class Project(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(16, 24))

        def forward(self, x):
            return x @ self.w

    path = tmp_path_factory.mktemp("pt2") / "dynamic.pt2"
    program = torch.export.export(Project().eval(), (torch.randn(4, 16),),
                                  dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=1024)},))
    torch.export.save(program, str(path))
    return path


def with_size(src, dst, expr):
    """A copy of the archive whose input x's first size is `expr` (sympy.srepr text, 's77'
    standing for the symbol torch named); returns that symbol's name."""
    name = None
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("models/model.json"):
                doc = json.loads(data)
                sizes = doc["graph_module"]["graph"]["tensor_values"]["x"]["sizes"]
                name = re.search(r"Symbol\('(\w+)'", sizes[0]["as_expr"]["expr_str"]).group(1)
                sizes[0] = {"as_expr": {"expr_str": expr.replace("'s77'", f"'{name}'"),
                                        "hint": {"as_int": 4}}}
                data = json.dumps(doc).encode()
            zout.writestr(info, data)
    return name


BIG = "Integer(9223372036854775807)"


@pytest.mark.parametrize("expr, hints, what", [
    (power(power(power(power("Integer(3)", 64), 64), 64), 64), None, "more than 4096 bits"),
    (power(power(power(power(S, 64), 64), 64), 64), None, "more than 4096 bits"),
    ("Mul(" + ", ".join([power(BIG, 64)] * 5) + f", {S})", None, "more than 4096 bits"),
    (f"FloorDiv({S}, Integer(0))", None, "divides by zero"),
    (f"FloorDiv({S}, Add({S}, Integer(-4)))", [4], "divides by zero"),
    (f"Mul(Integer(2147483647), {S})", [4], "is more than 2147483647"),
], ids=["tower", "symbol_tower", "big_products", "floordiv_0", "floordiv_0_at_a_hint", "over_max_dim_at_a_hint"])
def test_symbolic_sizes_are_bounded_before_arithmetic(dynamic_archive, tmp_path, expr, hints, what):
    from autotune_cli.model import find_gemms

    path = tmp_path / "hostile.pt2"
    name = with_size(dynamic_archive, path, expr)
    with pytest.raises(UserError) as caught:
        find_gemms(path, device="cpu", hints=hints and {name: hints})
    assert what in str(caught.value) and "\n" not in str(caught.value)


def test_sizes_as_torch_writes_them_still_read(dynamic_archive, tmp_path):
    from autotune_cli.model import find_gemms

    path = tmp_path / "fine.pt2"
    name = with_size(dynamic_archive, path, f"Mul(Integer(2), {power(S, 2)})")  # 2*s**2
    found = find_gemms(path, device="cpu", hints={name: [3]})
    assert [(f.problem.m, f.problem.n, f.problem.k) for f in found] == [(18, 24, 16)]


# ---- --from ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "zero", "urandom", "deep"])
def test_a_hostile_list_is_one_line(tmp_path, kind):
    path = tmp_path / "list.json"
    hostile(path, kind)
    done, found = finishes(read_problems, path, "cpu")
    assert done, "reading the list blocked"
    assert isinstance(found, UserError), repr(found)
    assert "\n" not in str(found) and str(path) in str(found)


def test_a_hostile_list_from_the_command(cli, cache_dir, tmp_path):
    path = tmp_path / "list.json"
    os.mkfifo(path)
    done, result = finishes(cli, "mm", "--from", path, "--device", "cpu")
    assert done, "mm --from blocked on a FIFO"
    code, out, err = result
    assert code == 2 and out == "" and err.count("\n") == 1 and "not a regular file" in err
    assert not cache_dir.exists()


# ---- options, and a cache folder that cannot be written -------------------------------

@pytest.mark.parametrize("args, what", [
    (["--gpus", "1000000"], "at most 256"),
    (["--gpus", "9" * 5000], "--gpus takes a positive count"),
    (["--timeout", "1e-300"], "--timeout must be at least"),
], ids=["gpus", "gpus_5000_digits", "timeout"])
def test_absurd_options_are_one_line(cli, cache_dir, tmp_path, dynamic_archive, args, what):
    code, out, err = cli("model", dynamic_archive, "--device", "cpu", "--hint", "x.0=8", *args)
    assert code == 2 and out == "" and err.count("\n") == 1 and what in err, err
    assert not cache_dir.exists()


def test_more_worker_groups_than_cores_is_refused(cache_dir):
    from autotune_cli.scaleout.local import local_devices
    from autotune_cli.settings import TuneSettings

    settings = TuneSettings(device="cpu", cache_dir=cache_dir, gpus=(os.cpu_count() or 1) + 1)
    with pytest.raises(UserError, match="worker groups"):
        local_devices(settings)


def unwritable_folders(tmp_path):
    folders = []
    if os.path.isdir("/proc/self"):  # not writable whoever we are
        folders.append("/proc/self")
    if os.geteuid() != 0:  # root writes whatever the mode says
        folder = tmp_path / "read-only"
        folder.mkdir(mode=0o555)
        folders.append(str(folder))
    return folders


def test_a_tune_into_a_folder_it_cannot_write_starts_nothing(cli, tmp_path, monkeypatch):
    folders = unwritable_folders(tmp_path)
    if not folders:
        pytest.skip("no folder here that this user cannot write")
    from autotune_cli.runner import executor

    def refuse(self):
        raise AssertionError("a worker was started")

    monkeypatch.setattr(executor.LocalExecutor, "start", refuse)
    for folder in folders:
        code, out, err = cli("mm", "--m", "8", "--n", "8", "--k", "8", "--device", "cpu",
                             "--templates", "aten", "--cache-dir", folder)
        assert code == 2 and out == "" and err.count("\n") == 1, err
        assert f"cannot write the cache folder {folder}" in err


def test_a_list_tuned_into_a_folder_it_cannot_write_is_one_error(cli, tmp_path):
    """`mm --from` refuses the whole list at once (one line, exit 2, nothing on stdout), not
    each of its problems with a table of none."""
    folders = unwritable_folders(tmp_path)
    if not folders:
        pytest.skip("no folder here that this user cannot write")
    listing = tmp_path / "problems.json"
    listing.write_text(json.dumps([{"m": 8, "n": 8, "k": 8}, {"m": 16, "n": 8, "k": 8}]))
    for folder in folders:
        for extra in ((), ("--json",)):
            code, out, err = cli("mm", "--from", str(listing), "--device", "cpu", "--templates", "aten",
                                 "--cache-dir", folder, *extra)
            assert code == 2 and out == "" and err.count("\n") == 1, err
            assert f"cannot write the cache folder {folder}" in err


def test_a_model_tuned_into_a_folder_it_cannot_write_is_one_error(cli, tmp_path):
    """`autotune model` refuses before its plan is shown: the error is stderr's one line."""
    folders = unwritable_folders(tmp_path)
    if not folders:
        pytest.skip("no folder here that this user cannot write")
    path = tmp_path / "linear.pt2"
    program = torch.export.export(torch.nn.Linear(16, 8), (torch.randn(4, 16),))
    torch.export.save(program, str(path))
    for folder in folders:
        code, out, err = cli("model", str(path), "--device", "cpu", "--templates", "aten", "--cache-dir", folder)
        assert code == 2 and out == "" and err.count("\n") == 1, err
        assert f"cannot write the cache folder {folder}" in err
