"""What a benchmark run says about one candidate."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping


OK = "ok"
COMPILE_ERROR = "compile_error"
RUNTIME_ERROR = "runtime_error"
TIMEOUT = "timeout"
WRONG_RESULT = "wrong_result"
SKIPPED = "skipped"
BUDGET_RAN_OUT = "the tuning budget ran out"  # the error of a candidate --budget left untimed
STATUSES = (OK, COMPILE_ERROR, RUNTIME_ERROR, TIMEOUT, WRONG_RESULT, SKIPPED)


@dataclass(frozen=True)
class Candidate:
    """One candidate's outcome. Only status `ok` candidates may win."""

    uid: str
    params: dict[str, Any]
    status: str
    ms: float | None = None  # median time
    p20: float | None = None
    p80: float | None = None
    runs: int = 0
    error: str = ""
    max_rel_error: float | None = None  # ‖out − ref‖ / ‖ref‖ of the verification run
    # the largest entry error over what it is allowed, over every check of the run (passing:
    # at most 1): how close to the tolerance the kernel came (runner/verify.check)
    worst_of_allowed: float | None = None
    compile_s: float | None = None
    first_run_s: float | None = None  # first launch in the timing process (a cache load when precompiled)
    timing: str = ""  # how it was timed: events, graph×N, perf_counter
    phases: dict[str, float] | None = None  # seconds in the timing process: build, inputs, first_run, check, timing
    # timed beside the best cuBLAS candidate in sustained passes (search/base.confirm_against_vendor)
    confirmed: bool = False
    # the device (its index: a GPU's on the host, a CPU worker group's slot) whose timing
    # worker measured it, where that was another device of the same model lending its idle
    # worker (scaleout.local.MultiDeviceTuner, a run's tail); None: the tuning device's own
    measured_on: int | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")

    @property
    def ok(self) -> bool:
        return self.status == OK and self.ms is not None

    @property
    def cut_by_budget(self) -> bool:
        """Skipped because --budget ran out before it finished (resumable, not judged)."""
        return self.error == BUDGET_RAN_OUT

    @property
    def identity(self) -> tuple:
        """Which config it is a result of (config_identity)."""
        return config_identity(self.uid, self.params)

    def label(self) -> str:
        return f"{self.uid} {params_str(self.params)}".strip()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Candidate":
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})


def config_identity(uid: str, params: Mapping[str, Any]) -> tuple:
    """A config's identity: its template's uid and its params, in no particular order, each
    value by its text. The one test of "the same config" for a choice, a result, a stored
    winner and a compile request."""
    return (uid, tuple(sorted((k, str(v)) for k, v in params.items())))


# Every param that tells one config of a template from another (tuned, or a --space
# choice) has a short name here: a table row, the winner's line and `cache show` name the
# config by these alone (tests/test_tables.py checks every registered template).
SHORT_NAMES = {
    "BLOCK_M": "BM", "BLOCK_N": "BN", "BLOCK_K": "BK", "GROUP_M": "G",
    "num_stages": "s", "num_warps": "w", "SPLIT_K": "sk", "ATOMIC_ADD": "atomic",
    "FUSED_REDUCE": "fused", "FLATTEN": "flat", "FIXED_NK": "fixed",
    "PAD_BYTES": "pad", "ZERO_PAD": "zpad", "DOT": "dot", "REDUCE_EACH": "each", "EVICT": "evict",
    "PDL": "pdl", "WARP_SPECIALIZE": "ws", "PROMOTE_IN_DOT": "promote", "FLAT_ROW": "row",
}


# Flags left unsaid at their usual value, to keep rows short: a config's FIXED_NK twin says
# `fixed1`, the config itself nothing; a gemv that does not evict B's loads early, `evict0`.
UNSAID_AT = {"FIXED_NK": 0, "ZERO_PAD": 0, "DOT": 0, "REDUCE_EACH": 0, "EVICT": 1, "PDL": 0,
             "WARP_SPECIALIZE": 0, "PROMOTE_IN_DOT": 0, "FLAT_ROW": 0}


def params_str(params: dict[str, Any]) -> str:
    """One line: the tuned values only (the ones fixed by the problem are left out)."""
    shown = [f"{short}{params[key]}" for key, short in SHORT_NAMES.items()
             if key in params and not (key in UNSAID_AT and params[key] == UNSAID_AT[key])]
    return " ".join(shown)

