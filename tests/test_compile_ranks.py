"""autotune_cli.compile in a torch.distributed job (scaleout/ranks.py), on the CPU: two
ranks over gloo, each compiling the same small model with tuning on (Triton's mm under the
interpreter, one config), split the missing problems, share every result and route the same
winners; a rank whose tuning raises leaves the other finishing."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest
import torch

import autotune_cli
from autotune_cli import api
from autotune_cli.scaleout import ranks

ONE_CONFIG = [{"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 2, "num_warps": 4}]
T, C, H, V = 16, 32, 64, 48  # tokens, width, hidden, vocabulary
PROBLEMS = 4  # the model's distinct matmul problems
STALL_BOUND_S = 300.0  # a stalled rank waits for rank 0's report; this only keeps a broken job from hanging


class Model(torch.nn.Module):
    """fc1 (bias) -> GELU -> fc2 (bias), a bias-free head, and a plain x @ W: four problems."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(C, H)
        self.fc2 = torch.nn.Linear(H, C)
        self.head = torch.nn.Linear(C, V, bias=False)
        self.w = torch.nn.Parameter(torch.randn(C, C) / C ** 0.5)
        for p in self.parameters():
            p.requires_grad_(False)

    def forward(self, x):
        h = self.fc2(torch.nn.functional.gelu(self.fc1(x)))
        return self.head(x + h), torch.mm(x, self.w)


def settings(cache: Path, space: Path):
    from autotune_cli.settings import TuneSettings

    return TuneSettings(device="cpu", cache_dir=cache, templates=("triton::mm",), space_file=str(space), workers=1)


def compile_once(cache: Path, space: Path, tuned: list) -> list:
    """Compile and run the model in a fresh state; `tuned` gets the problem keys this
    process tuned; returns the routes as (cache key, uid, params, fallback)."""
    from autotune_cli.routing import tuning as compile_tune

    api.reset()
    torch._dynamo.reset()
    real = compile_tune.tune_missing

    def spy(problems, *args, **kwargs):
        tuned.extend(p.key() for p in problems)
        return real(problems, *args, **kwargs)

    compile_tune.tune_missing = spy
    try:
        routes: list = []
        x = torch.randn(T, C, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            autotune_cli.compile(Model(), backend="eager", routes=routes, fullgraph=True,
                                 tune=settings(cache, space))(x)
    finally:
        compile_tune.tune_missing = real
    return [(r.key, r.uid, r.params, r.fallback) for r in routes]


def entries(cache: Path) -> dict:
    from autotune_cli.store.cache import Cache

    return {key: entry.to_dict() for key, entry in Cache(cache).load().items()}


def rank_main(rank: int, world: int, port: int, out: str, scenario: str) -> None:
    """One rank: its stderr to a file, gloo, the scenario's compiles; what it saw as JSON."""
    out_dir = Path(out)
    fd = os.open(out_dir / f"err{rank}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=world)
    space = out_dir / "space.json"
    report: dict = {}
    if scenario == "split":
        cache = out_dir / f"cache{rank}"
        report["tuned"] = []
        report["routes"] = compile_once(cache, space, report["tuned"])
        report["entries"] = entries(cache)
        # rank 1 loses its cache: rank 0 holds every winner, so no rank tunes; rank 1 is given them
        dist.barrier()
        if rank == 1:
            (cache / "autotune-cache.json").unlink()
        dist.barrier()
        report["tuned_again"] = []
        report["routes_again"] = compile_once(cache, space, report["tuned_again"])
        report["entries_again"] = entries(cache)
    elif scenario == "crash":
        cache = out_dir / "cache"  # one folder for both ranks: one writer
        if rank == 1:
            from autotune_cli.tune.tuner import Tuner

            real, calls = Tuner.tune, []

            def tune(self, problem, *args, **kwargs):
                calls.append(problem)
                if len(calls) == 2:
                    raise RuntimeError("boom")
                return real(self, problem, *args, **kwargs)

            Tuner.tune = tune
        report["tuned"] = []
        report["routes"] = compile_once(cache, space, report["tuned"])
        report["entries"] = entries(cache)
    elif scenario == "slow":
        # rank 1 stalls past the group's timeout: rank 0 gives up on the gather, alone. The
        # stall ends once rank 0 has written its report, so it outlasts the timeout however
        # long rank 0 takes
        cache = out_dir / f"cache{rank}"
        if rank == 1:
            from autotune_cli.tune.tuner import Tuner

            def tune(self, problem, *args, **kwargs):
                bound = time.monotonic() + STALL_BOUND_S
                while not (out_dir / "rank0.json").exists() and time.monotonic() < bound:
                    time.sleep(0.05)
                raise RuntimeError("stalled")

            Tuner.tune = tune
        report["tuned"] = []
        report["routes"] = compile_once(cache, space, report["tuned"])
        report["entries"] = entries(cache)
        report["tuned_again"] = []
        report["routes_again"] = compile_once(cache, space, report["tuned_again"])
    (out_dir / f"rank{rank}.json").write_text(json.dumps(report, default=str))
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - after a timed-out collective the other rank may be gone
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(tmp_path: Path, scenario: str, world: int = 2,
            timeout_s: float | None = None) -> tuple[list[dict], list[str]]:
    """Run `scenario` on `world` spawned ranks: each rank's report and stderr."""
    import torch.multiprocessing as mp

    (tmp_path / "space.json").write_text(json.dumps(ONE_CONFIG))
    if timeout_s is not None:  # the spawned ranks inherit it
        os.environ[ranks.TIMEOUT_ENV] = str(timeout_s)
    context = mp.start_processes(rank_main, args=(world, free_port(), str(tmp_path), scenario), nprocs=world,
                                 join=False, start_method="spawn")
    os.environ.pop(ranks.TIMEOUT_ENV, None)
    deadline = time.monotonic() + 300
    while not context.join(timeout=5):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail("the ranks did not finish: " + (tmp_path / "err0").read_text()[-2000:])
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]
    return reports, [(tmp_path / f"err{r}").read_text() for r in range(world)]


def normal(routes: list) -> list:
    return [tuple(json.dumps(x, sort_keys=True) for x in route) for route in routes]


@pytest.mark.slow
def test_ranks_split_the_problems_share_every_entry_and_route_the_same_winners(tmp_path):
    """Two ranks with their own caches: each tunes a part of the four problems (no problem
    twice), each cache ends with all four entries, the same entry under each key (one
    tune's timings, not two), and both route every matmul to the same key and config. With
    rank 1's cache gone, the next compile tunes nothing: rank 0 holds every winner, and
    gives them to rank 1."""
    (r0, r1), (err0, err1) = run_job(tmp_path, "split")
    assert r0["tuned"] and r1["tuned"] and not set(r0["tuned"]) & set(r1["tuned"])
    assert len(r0["tuned"]) + len(r1["tuned"]) == PROBLEMS
    assert len(r0["entries"]) == PROBLEMS and r0["entries"] == r1["entries"]
    assert len(r0["routes"]) == PROBLEMS and not any(route[3] for route in r0["routes"])
    assert normal(r0["routes"]) == normal(r1["routes"])
    assert {route[0] for route in r0["routes"]} == set(r0["entries"])
    # only rank 0 shows progress and the job's line
    assert f"2 ranks share this graph's tuning: {PROBLEMS} problems to tune" in err0
    assert "tuning 2 matmul problems" in err0
    assert "tuning" not in err1 and "ranks share" not in err1

    assert r0["tuned_again"] == [] and r1["tuned_again"] == []
    assert r1["entries_again"] == r0["entries"]
    assert normal(r1["routes_again"]) == normal(r0["routes"]) == normal(r0["routes_again"])
    assert f"{PROBLEMS} given from a rank's cache" in err0


@pytest.mark.slow
def test_a_rank_whose_tuning_raises_leaves_the_other_finishing_and_nothing_saved_lost(tmp_path):
    """Rank 1's tune raises on its second problem: rank 0 finishes its own share, names the
    problem left to the compiler, and both ranks route the same three winners; the entry
    rank 1 finished is in the (shared) cache, and so is every one rank 0 tuned."""
    (r0, r1), (err0, err1) = run_job(tmp_path, "crash")
    assert len(r0["tuned"]) == 2 and len(r1["tuned"]) == 2 and not set(r0["tuned"]) & set(r1["tuned"])
    assert "tuning failed on rank 1 (RuntimeError: boom): 1 problem left to the compiler" in err0
    left = sorted(r1["tuned"])[1]  # rank 1's second problem (a share is tuned in key order)
    assert len(r0["entries"]) == PROBLEMS - 1 and r0["entries"] == r1["entries"]
    stored = {key.split("@")[0] for key in r0["entries"]}
    assert left not in stored and set(r0["tuned"]) <= stored and sorted(r1["tuned"])[0] in stored
    assert normal(r0["routes"]) == normal(r1["routes"])
    assert sum(1 for route in r0["routes"] if not route[3]) == PROBLEMS - 1


@pytest.mark.slow
def test_a_gather_that_times_out_is_one_line_and_the_rank_routes_what_it_tuned(tmp_path):
    """Rank 1 stalls past the group's timeout (2 s): rank 0's gather of results gives up with
    one line, rank 0 routes the two problems it tuned and leaves rank 1's to the compiler;
    its next compile tunes nothing and waits on no one (the job can no longer agree)."""
    (r0, r1), (err0, err1) = run_job(tmp_path, "slow", timeout_s=2)
    assert "rank 0: gathering the tuning results failed" in err0
    assert len(r0["tuned"]) == 2 and len(r0["entries"]) == 2
    assert sorted(route[0].split("@")[0] for route in r0["routes"] if not route[3]) == sorted(r0["tuned"])
    assert sum(1 for route in r0["routes"] if route[3]) == PROBLEMS - 2
    assert r0["tuned_again"] == [] and normal(r0["routes_again"]) == normal(r0["routes"])
    assert err0.count("failed (") == 1  # the second compile made no collective
    assert "rank 1:" in err1 and not r1["entries"]


def test_a_job_of_one_rank_tunes_as_without_torch_distributed(tmp_path, capfd):
    """dist initialized with one rank: no gloo group, no job line, the compile tunes its
    four problems alone, as without torch.distributed."""
    import torch.distributed as dist

    space = tmp_path / "space.json"
    space.write_text(json.dumps(ONE_CONFIG))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        assert not ranks.in_job()
        tuned: list = []
        routes = compile_once(tmp_path / "cache", space, tuned)
    finally:
        dist.destroy_process_group()
        api.reset()
        torch._dynamo.reset()
    err = capfd.readouterr().err
    assert len(tuned) == PROBLEMS and not any(route[3] for route in routes)
    assert "tuning 4 matmul problems" in err and "ranks share" not in err
    assert not ranks._GROUPS


def state(rank: int, machine: str = "h200", held=()) -> "ranks.RankState":
    return ranks.RankState(rank, machine, "host", "/cache", {key: (f"{key}@{who}", ("w", who)) for key, who in held})


def test_the_plan_deals_what_no_rank_holds_per_gpu_model_and_gives_what_one_holds():
    """Problems no rank of a GPU model holds are dealt in key order among that model's ranks;
    one any of its ranks holds is tuned by none, the lowest holder gives its entry when a
    rank lacks it or holds another winner; ranks of another model tune their own."""
    keys = ["a", "b", "c", "d"]
    states = [state(0, held=[("a", "x")]), state(1), state(2, "a100"), state(3, held=[("a", "x")])]
    work = ranks.plan(states, keys)
    assert work.tune == {0: ("b",), 1: ("c",), 2: ("a", "b", "c", "d"), 3: ("d",)}
    assert work.give == {0: ("a",), 1: (), 2: (), 3: ()}
    agreed = ranks.plan([state(0, held=[("a", "x")]), state(1, held=[("a", "x")])], ["a"])
    assert agreed.idle
    differ = ranks.plan([state(0, held=[("a", "x")]), state(1, held=[("a", "y")])], ["a"])
    assert differ.give == {0: ("a",), 1: ()} and not any(differ.tune.values())
