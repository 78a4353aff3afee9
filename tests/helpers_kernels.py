"""Shared by the template tests: build a kernel, run it for real and verify it. The tests
assert on what comes back (`KernelRun.correct`, `KernelRun.discriminating`)."""

from dataclasses import dataclass, field
from typing import Any

from autotune_cli.runner.verify import Check, check, make_operands, poison, reference


@dataclass
class KernelRun:
    run: Any  # the runnable, built once
    ops: Any = None  # the last call's operands
    verdicts: list[Check] = field(default_factory=list)  # each call's output vs its own product
    decoys: list[Check] = field(default_factory=list)  # each call's output vs another seed's product

    @property
    def correct(self) -> bool:
        return bool(self.verdicts) and all(v.ok for v in self.verdicts)

    @property
    def discriminating(self) -> bool:
        """The check is not vacuous: the product of other inputs fails it every time."""
        return bool(self.decoys) and not any(d.ok for d in self.decoys)

    @property
    def reasons(self) -> list[str]:
        return [v.reason for v in self.verdicts if not v.ok]


def run_kernel(problem, template, config, tmp_path, seed=1, calls=1) -> KernelRun:
    """Build once; then `calls` times: fresh operands (seeds seed, seed+1, ...), the output
    made with the template's row pitch (`out_pitch`) as the worker makes it and poisoned with
    NaN, run, check against float64, and check against the product of a different seed's
    operands too (which a meaningful check must reject)."""
    params = template.full_params(problem, config)
    pitch = template.out_pitch(problem, params)
    result = KernelRun(run=template.build(problem, params, str(tmp_path)))
    for call in range(calls):
        ops = make_operands(problem, seed=seed + call, device="cpu", pitch=pitch)
        ref = reference(problem, ops)
        poison(ops)
        result.run(ops)
        result.verdicts.append(check(problem, ops.out, ref))
        other = make_operands(problem, seed=seed + call + 1000, device="cpu")
        result.decoys.append(check(problem, ops.out, reference(problem, other)))
        result.ops = ops
    return result


def check_configs_on_gpu(problem, template, configs, tmp_path, seeds=(1, 2)) -> None:
    """Each config, fitted to this GPU as the tuner fits it, built and run on fresh
    operands for every seed (a kept workspace reused), its NaN-poisoned output checked
    against float64."""
    from autotune_cli.hardware.device import probe_device

    assert configs
    device = probe_device("cuda")
    for config in (template.fit_to_device(c, device) for c in configs):
        run = template.build(problem, template.full_params(problem, config), str(tmp_path))
        for seed in seeds:
            ops = make_operands(problem, seed=seed, device="cuda")
            ops.out.fill_(float("nan"))
            run(ops)
            verdict = check(problem, ops.out, reference(problem, ops))
            assert verdict.ok, (config, verdict.reason)


# Configs the compile-pool tests build: one per Triton template family.
POOL_CONFIGS = {
    "triton::mm": {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 3, "num_warps": 4},
    "triton::mm_persistent_tma": {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8,
                                  "num_stages": 3, "num_warps": 8, "FLATTEN": 0},
    "triton::mm_splitk": {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 8, "num_stages": 4,
                          "num_warps": 4, "SPLIT_K": 4},
}


def compile_through_pool(device, cases, kernel_dir, processes: int = 2, timeout_s: float = 300,
                         by_index: bool = False):
    """Compile each (uid, problem, config) of `cases` in a real compile pool of `processes`
    CUDA compile processes for `device`; returns ({uid: the pool's answer, a CompileAnswer as a
    dict}, the pool, by then closed). `by_index`: the answers by the case's index instead (several cases of one uid)."""
    import threading
    from dataclasses import asdict

    from autotune_cli.runner.compile_pool import CompilePool, compile_key
    from autotune_cli.runner.messages import COMPILE, WorkerTask
    from autotune_cli.runner.processes import worker_context
    from autotune_cli.candidates.choices import KernelTemplateChoice
    from autotune_cli.settings import Switches
    from autotune_cli.templates import get_template

    switches = Switches.from_environment()
    pool = CompilePool(worker_context(switches.start_method, "cuda"), [device], processes, (), timeout_s=timeout_s,
                       startup_timeout_s=timeout_s, switches=switches)
    answers: dict[str, dict] = {}
    done = threading.Event()

    def answer(uid):
        def callback(payload):
            answers[uid] = asdict(payload)
            if len(answers) == len(cases):
                done.set()
        return callback

    try:
        for index, (uid, problem, config) in enumerate(cases):
            choice = KernelTemplateChoice.make(get_template(uid), problem, config)
            task = WorkerTask.for_choice(choice, COMPILE, 0, str(kernel_dir), None)
            pool.submit(compile_key(choice), task, owner=None, callback=answer(index if by_index else uid))
        assert done.wait(timeout=timeout_s), f"answers so far: {answers}"
    finally:
        pool.close()
    return answers, pool
