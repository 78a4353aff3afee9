"""Shared by the template tests: build a kernel, run it for real and verify it."""

from autotune_cli.bench.verify import check, make_operands, poison, reference


def run_and_check(problem, template, config, tmp_path, seed=1, calls=1):
    """Build once; then `calls` times: fresh operands (seeds seed, seed+1, ...), output
    poisoned with NaN, run, verify against float64; and show each check is not vacuous (a
    different seed's product fails it). Returns the runnable and the last operands."""
    params = template.full_params(problem, config)
    run = template.build(problem, params, str(tmp_path))
    for call in range(calls):
        ops = make_operands(problem, seed=seed + call, device="cpu")
        ref = reference(problem, ops)
        poison(ops)
        run(ops)
        verdict = check(problem, ops.out, ref)
        assert verdict.ok, verdict.reason
        other = make_operands(problem, seed=seed + call + 1000, device="cpu")
        assert not check(problem, ops.out, reference(problem, other)).ok
    return run, ops
