"""KernelTemplateChoice and the finalize step that prunes choices before anything compiles.

`get_choices` asks each template's heuristic for configs (lazily), wraps them in cheap
KernelTemplateChoice objects, and runs the prune pipeline: an ordered list of stages, each
of which removes choices and says why.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from ..errors import UserError
from ..hardware.device import DeviceInfo
from ..hardware.registers import register_budget
from ..heuristics import lookup_heuristic
from ..heuristics.spaces import load_space_file
from ..problem import GemmProblem
from ..store.results import config_identity, params_str
from ..settings import TuneSettings
from ..templates import Template, templates_for
from ..templates.triton_mm_padded import ALIGN_ELEMENTS
from ..templates.triton_swap_ab import TritonSwapABTemplate


@dataclass(frozen=True)
class KernelTemplateChoice:
    """template + problem + config: cheap to hold. Renders source and builds the runnable
    only when asked, and remembers the outcome (a failure included)."""

    template: Template
    problem: GemmProblem
    config: tuple[tuple[str, Any], ...]
    _memo: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @classmethod
    def make(cls, template: Template, problem: GemmProblem, config: dict[str, Any]):
        return cls(template, problem, tuple(sorted(config.items())))

    @property
    def uid(self) -> str:
        return self.template.uid

    @property
    def config_dict(self) -> dict[str, Any]:
        return dict(self.config)

    @property
    def params(self) -> dict[str, Any]:
        if "params" not in self._memo:
            self._memo["params"] = self.template.full_params(self.problem, self.config_dict)
        return dict(self._memo["params"])

    @property
    def identity(self) -> tuple:
        """Which config it is (results.config_identity), as its results are."""
        if "identity" not in self._memo:
            self._memo["identity"] = config_identity(self.uid, self.params)
        return self._memo["identity"]

    @property
    def source(self) -> str | None:
        if "source" not in self._memo:
            self._memo["source"] = self.template.render(self.problem, self.params)
        return self._memo["source"]

    def fixed_twin(self) -> "KernelTemplateChoice | None":
        """This config with the problem's sizes written into its kernel (Template.fixed_twin),
        or None where the template offers none: timed for the best contenders alone
        (search/base.time_fixed_twins), and a result a resumed tune or a --space check knows."""
        config = self.template.fixed_twin(self.config_dict)
        return None if config is None else KernelTemplateChoice.make(self.template, self.problem, config)

    def build(self, kernel_dir: str):
        """The runnable, built once; a build failure is remembered and raised again."""
        if "built" not in self._memo:
            try:
                self._memo["built"] = (True, self.template.build(self.problem, self.params, kernel_dir))
            except Exception as exc:  # noqa: BLE001 - remembered, re-raised to each caller
                self._memo["built"] = (False, exc)
        ok, value = self._memo["built"]
        if not ok:
            raise value
        return value

    def __str__(self) -> str:
        return f"{self.uid} {params_str(self.config_dict)}".strip()


# -- prune pipeline ---------------------------------------------------------------------------

@dataclass
class PruneContext:
    problem: GemmProblem
    device: DeviceInfo
    settings: TuneSettings


@dataclass(frozen=True)
class Pruned:
    choice: KernelTemplateChoice
    stage: str
    reason: str


PruneStage = Callable[[KernelTemplateChoice, PruneContext], str | None]  # reason, or None to keep


def _triton(choice: KernelTemplateChoice) -> bool:
    return choice.template.backend == "triton"


def hardware_stage(choice: KernelTemplateChoice, ctx: PruneContext) -> str | None:
    """Templates that need a feature this device or Triton lacks."""
    return choice.template.unavailable_reason(ctx.problem, ctx.device)


def shared_memory_stage(choice: KernelTemplateChoice, ctx: PruneContext) -> str | None:
    """Operand tiles of every pipeline stage must fit the block's shared memory."""
    if not _triton(choice) or not ctx.device.smem_per_block:
        return None
    p = choice.config_dict
    stages = max(1, p["num_stages"])
    need = ctx.problem.dtype_size * (p["BLOCK_M"] * p["BLOCK_K"] + p["BLOCK_K"] * p["BLOCK_N"]) * stages
    if need > ctx.device.smem_per_block:
        return f"needs {need} B of shared memory, the device has {ctx.device.smem_per_block}"
    return None


def register_stage(choice: KernelTemplateChoice, ctx: PruneContext) -> str | None:
    """The fp32 accumulator alone must fit the GPU model's accumulator budget
    (hardware/registers.py); beyond that the kernel spills and is never competitive."""
    if not _triton(choice) or ctx.device.device_type != "cuda":
        return None
    p = choice.config_dict
    per_thread = p["BLOCK_M"] * p["BLOCK_N"] // (32 * p["num_warps"])
    if per_thread > register_budget(ctx.device).accumulator:
        return f"accumulator needs {per_thread} registers per thread (spills)"
    return None


def interpreter_seconds(problem: GemmProblem, config: dict[str, Any], runs: int) -> float:
    """Estimated interpreter time: ~4.3 ms per program per K step plus a term for tile
    volume (fitted to 128^3 with 32^3 tiles ~0.3 s and 64^3 tiles ~60 ms)."""
    return _interpreter_seconds(problem.b, problem.m, problem.n, problem.k, config, runs)


def _interpreter_seconds(b: int, m: int, n: int, k: int, config: dict[str, Any], runs: int) -> float:
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    programs = -(-m // bm) * -(-n // bn) * b
    k_steps = -(-k // bk)
    per_step_ms = 4.3 + 1.2e-5 * bm * bn * bk
    return programs * k_steps * per_step_ms * runs / 1000.0


def interpreter_runs(settings: TuneSettings) -> int:
    """Runs of a candidate under the interpreter: the first, the timed ones (at least
    min_runs; more only while under the timing's budget) and the confirmation launches."""
    timing = settings.measure.timing
    return 1 + timing.min_runs + timing.confirm_launches


def interpreter_limit(settings: TuneSettings) -> tuple[float, str]:
    """The most seconds a config may take under the interpreter, and the option that sets it:
    --interpreter-budget, or --timeout where that is shorter (past it the candidate is killed)."""
    if settings.timeout_s < settings.interpreter_budget_s:
        return settings.timeout_s, "--timeout"
    return settings.interpreter_budget_s, "--interpreter-budget"


def _seconds_text(seconds: float) -> str:
    """Whole seconds from 10 s; below, two significant digits (0.0043), so that an estimate
    over a limit of 0.001 s never reads as ~0 s."""
    return f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.2g}"


def interpreter_stage(choice: KernelTemplateChoice, ctx: PruneContext) -> str | None:
    if not _triton(choice) or ctx.device.device_type != "cpu":
        return None
    seconds = interpreter_seconds(ctx.problem, choice.config_dict, interpreter_runs(ctx.settings))
    limit, option = interpreter_limit(ctx.settings)
    if seconds > limit:
        return f"the interpreter would take ~{_seconds_text(seconds)} s (over {option} {limit:g} s)"
    return None


def check_interpretable(problem: GemmProblem, choice_set: ChoiceSet, settings: TuneSettings) -> None:
    """On the CPU, refuse at once a problem whose every Triton config the interpreter cost
    pruned, saying what size fits: its tune would time the BLAS call alone (or run until
    --timeout trying), which ranks no kernel. --templates aten asks for that tune."""
    if problem.device != "cpu" or any(_triton(c) for c in choice_set.choices):
        return
    over = [p.choice.config_dict for p in choice_set.pruned if p.stage == "interpreter_cost"]
    if not over:
        return
    runs = interpreter_runs(settings)
    limit, option = interpreter_limit(settings)
    cheapest = min(over, key=lambda config: interpreter_seconds(problem, config, runs))
    seconds = interpreter_seconds(problem, cheapest, runs)
    fits = _fitting_size(problem, cheapest, runs, limit)
    size = "no size fits" if fits is None else f"about {fits} fits"
    raise UserError(f"{problem.describe()} is too large to time under Triton's interpreter on the CPU: "
                    f"its fastest config would take ~{_seconds_text(seconds)} s, over {option} {limit:g} s; "
                    f"{size} (--templates aten times the BLAS call alone)")


def _fitting_size(problem: GemmProblem, config: dict[str, Any], runs: int, limit: float) -> str | None:
    """A size at which `config` fits `limit` under the interpreter: a bmm's batch cut first,
    else M, N and K shrunk alike (multiples of 16); None where even 16^3 does not fit. The
    time goes with programs x K steps: the batch times the cube of the scale."""
    dims = (problem.m, problem.n, problem.k)
    if problem.b > 1:
        batch = int(limit // _interpreter_seconds(1, *dims, config, runs))
        if batch >= 1:
            return f"{batch}x{dims[0]}x{dims[1]}x{dims[2]}"
    scale = (limit / _interpreter_seconds(1, *dims, config, runs)) ** (1 / 3)
    smallest = tuple(min(d, 16) for d in dims)
    while True:
        m, n, k = (min(d, max(16, int(d * scale) // 16 * 16)) for d in dims)
        if _interpreter_seconds(1, m, n, k, config, runs) <= limit:
            return f"1x{m}x{n}x{k}" if problem.b > 1 else f"{m}x{n}x{k}"
        if (m, n, k) == smallest:
            return None
        scale *= 0.9


# A config the tile model puts at this many times the problem's best modelled config or more
# is not compiled by the default search (tile_model_stage).
TILE_MODEL_OVER = 2.0


def tile_model_stage(kept: list[KernelTemplateChoice], ctx: PruneContext) -> list[tuple[KernelTemplateChoice, str]]:
    """Of a compute-bound problem's default search on a GPU, the configs of templates the tile
    model describes (`Template.tile_model == "prunes"`: plain tiled and persistent GEMMs, not swap-AB,
    split-K or GEMV, whose work the model does not see) that it puts at TILE_MODEL_OVER times
    the best of them or more: tiles far too small for the problem (16-64 wide on 4096^3),
    which cannot come near cuBLAS, yet took much of such a problem's compile pool
    (bench/README.md, "Cold tuning"). A memory-bound problem keeps every config: there the
    model's arithmetic term misjudges kernels that all wait on HBM. A user's --space and the
    exhaustive search (which ranks by the same model) keep theirs."""
    from ..hardware.roofline import compute_bound, tile_seconds

    if (ctx.device.device_type != "cuda" or ctx.settings.search != "default" or ctx.settings.space_file
            or not compute_bound(ctx.problem)):
        return []
    prunable = [c for c in kept if c.template.tile_model == "prunes"]
    if len(prunable) < 2:
        return []
    modelled = {id(c): tile_seconds(ctx.problem, c.config_dict, ctx.device.sm_count) for c in prunable}
    best = min(modelled.values())
    return [(c, f"the tile model puts it at {modelled[id(c)] / best:.1f}x the best config")
            for c in prunable if modelled[id(c)] >= TILE_MODEL_OVER * best]


DECODE_M = 16  # rows at or below which a problem is decode for decode_stage (triton::gemv's too)
# NVIDIA majors whose matrix instructions take 64 rows or more in the M slot: Hopper's
# warp-group MMA (9), datacenter Blackwell's (10); mma.sync before and beside them takes 16
WIDE_M_SLOT_MAJORS = (9, 10)
SWAP_AB = TritonSwapABTemplate.uid


def decode_stage(kept: list[KernelTemplateChoice], ctx: PruneContext) -> list[tuple[KernelTemplateChoice, str]]:
    """Of a decode problem's (M <= DECODE_M) default search on a GPU, the configs of templates
    whose tiles put A's rows in the matrix instruction's M slot (`Template.rows_in_m_slot`:
    plain tiled, persistent and split-K GEMMs), where triton::mm_swap_ab serves the problem:
    on Hopper (and datacenter Blackwell) that slot is 64 rows or more (mma.sync's, on other
    NVIDIA GPUs, is 16: the stage applies to WIDE_M_SLOT_MAJORS, and not to float32 without
    tf32, which takes no matrix instruction), so a 16-row tile leaves most of it idle;
    swap-AB runs the same product with the rows in the narrow slot, and triton::gemv splits
    K where the columns alone leave the GPU idle. On decode shapes none of them came near the
    winner, and they were most of the configs (bench/README.md, "Cold tuning"). A user's
    --space or --templates and the exhaustive search keep theirs."""
    device, problem = ctx.device, ctx.problem
    if (device.device_type != "cuda" or device.is_amd or ctx.settings.search != "default"
            or ctx.settings.space_file or ctx.settings.templates is not None or problem.m > DECODE_M
            or (device.compute_capability or (0, 0))[0] not in WIDE_M_SLOT_MAJORS
            or problem.fp32_mode == "ieee"  # float32 without tf32: no matrix instruction at all
            or not any(c.template.uid == SWAP_AB for c in kept)):
        return []
    return [(c, f"{ctx.problem.m} rows fill a fraction of its tiles' M slot; {SWAP_AB} serves this problem")
            for c in kept if getattr(c.template, "rows_in_m_slot", False)]


def misaligned_loads(problem: GemmProblem) -> bool:
    """Whether a plain tile reads an operand along K with rows off 16 elements (Triton's
    divisibility specialisation: such rows are loaded element by element). A's rows are K
    long (M where A is transposed), B's N long (K where B is transposed, an nn.Linear's
    weight): an odd N with B stored [N, K] leaves only the output's rows misaligned, which
    a tile writes with masked stores."""
    a_pitch = problem.m if problem.a_transposed else problem.k
    b_pitch = problem.k if problem.b_transposed else problem.n
    return a_pitch % ALIGN_ELEMENTS != 0 or b_pitch % ALIGN_ELEMENTS != 0


def misaligned_stage(kept: list[KernelTemplateChoice], ctx: PruneContext) -> list[tuple[KernelTemplateChoice, str]]:
    """Of a GPU problem's default search whose plain tiles would load misaligned rows
    (`misaligned_loads`), the configs of a template whose padded twin also serves it
    (the twin's `Template.pads`: triton::mm_padded pads triton::mm, offered where K or N is
    not a multiple of 16): the twin runs the same tiles on copies with aligned rows, loaded 16
    bytes at a time, where this one loads the misaligned rows element by element and takes
    the longest compiles of the problem; no plain tile came near the best padded one
    (bench/README.md, "Cold tuning"). Where only the output's rows are off (an odd N with B
    stored [N, K]) the plain tiles stay: their loads are aligned, and the twin would copy all
    of B to get what they have (bench/README.md, "Odd widths and small-M prefill"). A
    user's --space or --templates and the exhaustive search keep theirs."""
    if (ctx.device.device_type != "cuda" or ctx.settings.search != "default" or ctx.settings.space_file
            or ctx.settings.templates is not None or not misaligned_loads(ctx.problem)):
        return []
    twins = {c.template.pads: c.template.uid for c in kept if c.template.pads}
    return [(c, f"its rows are misaligned; {twins[c.template.uid]} runs its tiles on aligned copies")
            for c in kept if c.template.uid in twins]


# Stages over the whole list of kept choices, after the per-choice ones: (name, stage), each
# returning the (choice, reason) pairs it removes.
SET_STAGES = [("tile_model", tile_model_stage), ("decode", decode_stage), ("misaligned", misaligned_stage)]


PRUNE_STAGES: list[tuple[str, PruneStage]] = [
    ("hardware", hardware_stage),
    ("shared_memory", shared_memory_stage),
    ("registers", register_stage),
    ("interpreter_cost", interpreter_stage),
]


@dataclass
class ChoiceSet:
    choices: list[KernelTemplateChoice]
    pruned: list[Pruned]
    considered: int
    cut_short: bool = False  # the deadline passed before every config was listed
    # uid -> (configs the user's --space lists under it that gave no config here, how many
    # it lists): forms the problem cannot take (FLAT_ROW past one row), or one config twice
    # once its blocks fit the problem; said, as nothing a user asked for goes unsaid
    space_left_out: dict[str, tuple[int, int]] = field(default_factory=dict)

    def pruned_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for item in self.pruned:
            counts[item.stage] = counts.get(item.stage, 0) + 1
        return counts


def _check_listed(choice: KernelTemplateChoice, space_file: str) -> None:
    """A config from the user's --space that its template refuses for this problem (gemv's
    DOT on blocks under 16, say) is bad input: one line naming the file, not a traceback."""
    try:
        choice.params  # noqa: B018 - derived (and checked) here, memoised for the tune
    except ValueError as exc:
        raise UserError(f"space file {space_file}: {exc} (the config as this problem takes it: "
                        f"{params_str(choice.config_dict)})") from None


def enumerate_configs(
    template: Template, problem: GemmProblem, settings: TuneSettings,
    user_space: dict[str, list[dict]] | None,
) -> Iterator[dict[str, Any]]:
    space = None
    if user_space is not None and template.takes_configs:
        space = user_space.get(template.uid, user_space.get("*"))
    heuristic = lookup_heuristic(template.uid, problem.device, problem.op)
    yield from heuristic.get_configs(problem, settings.search, space)


def get_choices(
    problem: GemmProblem, device: DeviceInfo, settings: TuneSettings,
    templates: Iterable[Template] | None = None,
    stages: list[tuple[str, PruneStage]] | None = None,
    deadline: float | None = None,
) -> ChoiceSet:
    """Every (template, config) worth benchmarking, after the prune pipeline. Past
    `deadline` (time.monotonic(), --budget) no more configs are listed: a heuristic or a
    space file may offer more than the budget can enumerate."""
    if templates is None:
        templates = templates_for(problem, settings.templates)
    user_space = load_space_file(settings.space_file) if settings.space_file else None  # uids checked there
    ctx = PruneContext(problem, device, settings)
    kept: list[KernelTemplateChoice] = []
    pruned: list[Pruned] = []
    considered = 0
    cut_short = False
    space_left_out: dict[str, tuple[int, int]] = {}
    for template in templates:
        if cut_short:
            break
        listed, given = len((user_space or {}).get(template.uid, ())), 0
        for config in enumerate_configs(template, problem, settings, user_space):
            if deadline is not None and time.monotonic() > deadline:
                cut_short = True
                break
            considered += 1
            given += 1
            choice = KernelTemplateChoice.make(template, problem, template.fit_to_device(config, device))
            if user_space is not None:
                _check_listed(choice, settings.space_file)
            for stage_name, stage in stages or PRUNE_STAGES:
                reason = stage(choice, ctx)
                if reason:
                    pruned.append(Pruned(choice, stage_name, reason))
                    break
            else:
                kept.append(choice)
        if given < listed and not cut_short:
            space_left_out[template.uid] = (listed - given, listed)
    if stages is None:
        for stage_name, set_stage in SET_STAGES:
            removed = {id(choice): reason for choice, reason in set_stage(kept, ctx)}
            pruned += [Pruned(c, stage_name, removed[id(c)]) for c in kept if id(c) in removed]
            kept = [c for c in kept if id(c) not in removed]
    return ChoiceSet(kept, pruned, considered, cut_short, space_left_out)
