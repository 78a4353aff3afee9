"""Shared by the template tests: build a kernel, run it for real and verify it. The tests
assert on what comes back (`KernelRun.correct`, `KernelRun.discriminating`)."""

from dataclasses import dataclass, field
from typing import Any

from autotune_cli.bench.verify import Check, check, make_operands, poison, reference


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
