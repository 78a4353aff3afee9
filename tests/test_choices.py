from autotune_cli.candidates.choices import KernelTemplateChoice, get_choices, interpreter_seconds, misaligned_loads
from autotune_cli.hardware.device import DeviceInfo
from autotune_cli.problem import make_problem
from autotune_cli.settings import TuneSettings
from autotune_cli.templates import get_template
from autotune_cli.templates.base import Template
from helpers_devices import H200, CPU



class CountingTemplate(Template):
    uid = "test::counting"
    ops = ("mm",)
    backend = "test"

    def __init__(self):
        self.renders = 0
        self.builds = 0

    def source_text(self):
        return "counting"

    def render(self, problem, params):
        self.renders += 1
        return "source"

    def build(self, problem, params, kernel_dir):
        self.builds += 1
        raise RuntimeError("cannot build")


def test_choice_is_lazy_and_remembers_failure():
    template = CountingTemplate()
    choice = KernelTemplateChoice.make(template, make_problem(m=8, n=8, k=8), {})
    assert template.renders == 0 and template.builds == 0
    assert choice.source == "source" and choice.source == "source"
    assert template.renders == 1
    for _ in range(2):
        try:
            choice.build("/tmp")
        except RuntimeError as exc:
            assert "cannot build" in str(exc)
    assert template.builds == 1


def test_choices_hashable_and_equal_by_value():
    template = get_template("triton::mm")
    problem = make_problem(m=64, n=64, k=64)
    config = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 2, "num_warps": 4}
    a = KernelTemplateChoice.make(template, problem, config)
    b = KernelTemplateChoice.make(template, problem, dict(reversed(list(config.items()))))
    assert a == b and len({a, b}) == 1
    assert str(a) == "triton::mm BM32 BN32 BK32 G8 s2 w4"


def test_shared_memory_and_register_pruning_on_exhaustive_space():
    problem = make_problem(m=4096, n=4096, k=4096, dtype="bfloat16")
    settings = TuneSettings(device="cuda", search="exhaustive", templates=("aten::mm", "triton::mm"))
    result = get_choices(problem, H200, settings)
    counts = result.pruned_counts()
    assert result.considered == 1875 + 1  # + aten::mm
    assert counts["shared_memory"] > 0 and counts["registers"] > 0
    for choice in result.choices:
        if choice.uid == "triton::mm":
            p = choice.config_dict
            assert 2 * (p["BLOCK_M"] + p["BLOCK_N"]) * p["BLOCK_K"] * p["num_stages"] <= 232448
    for pruned in result.pruned:
        if pruned.stage == "shared_memory":
            p = pruned.choice.config_dict
            assert 2 * (p["BLOCK_M"] + p["BLOCK_N"]) * p["BLOCK_K"] * p["num_stages"] > 232448
    assert len(result.choices) + len(result.pruned) == result.considered


def test_default_cuda_space_of_a_square_problem_loses_only_its_small_tiles():
    """The static stages keep every shipped config of 4096^3; the tile model drops the tiles
    it puts at twice the best or more (all narrower than 64 on a side), and nothing of a memory-bound
    problem, of the exhaustive search, or of a template it does not describe (swap-AB)."""
    problem = make_problem(m=4096, n=4096, k=4096, dtype="bfloat16")
    result = get_choices(problem, H200, TuneSettings(device="cuda", templates=("aten::mm", "triton::mm")))
    assert set(result.pruned_counts()) == {"tile_model"} and len(result.choices) >= 15
    assert all(min(p.choice.config_dict["BLOCK_M"], p.choice.config_dict["BLOCK_N"]) < 64 for p in result.pruned)
    assert all(min(c.config_dict["BLOCK_M"], c.config_dict["BLOCK_N"]) >= 64
               for c in result.choices if c.uid == "triton::mm")
    assert "the tile model puts it at" in result.pruned[0].reason
    exhaustive = get_choices(problem, H200, TuneSettings(device="cuda", templates=("triton::mm",), search="exhaustive"))
    assert "tile_model" not in exhaustive.pruned_counts()
    decode = make_problem(m=16, n=4096, k=4096, dtype="bfloat16")
    assert "tile_model" not in get_choices(decode, H200, TuneSettings(device="cuda")).pruned_counts()


def test_a_decode_problem_leaves_out_the_plain_tiles_where_swap_ab_serves_it():
    """M <= 16 on a GPU, default search: triton::mm, the persistent TMA tiles and split-K
    (rows in the M slot) are not compiled when triton::mm_swap_ab is offered; swap-AB, GEMV
    and aten stay. Not at M = 17, not for the exhaustive search, a --space or a --templates
    selection, not before Hopper or on a consumer Blackwell (mma.sync), not on AMD, not for
    float32 without tf32, not on the CPU."""
    everything = None  # every template: a --templates selection is the user's, kept whole
    decode = make_problem(m=16, n=4096, k=4096, dtype="bfloat16", layout="nt")
    result = get_choices(decode, H200, TuneSettings(device="cuda", templates=everything))
    assert result.pruned_counts() == {"decode": 56}  # 22 tiled + 10 persistent + 24 split-K configs
    assert {p.choice.uid for p in result.pruned} == {"triton::mm", "triton::mm_persistent_tma", "triton::mm_splitk"}
    assert "triton::mm_swap_ab serves this problem" in result.pruned[0].reason
    assert {c.uid for c in result.choices} == {"aten::mm", "triton::mm_swap_ab", "triton::gemv"}
    assert len(result.choices) + len(result.pruned) == result.considered
    wider = make_problem(m=17, n=4096, k=4096, dtype="bfloat16", layout="nt")
    assert "decode" not in get_choices(wider, H200, TuneSettings(device="cuda", templates=everything)).pruned_counts()
    chosen = get_choices(decode, H200, TuneSettings(device="cuda", templates=("triton::mm", "triton::mm_swap_ab")))
    assert "decode" not in chosen.pruned_counts() and any(c.uid == "triton::mm" for c in chosen.choices)
    exhaustive = get_choices(decode, H200, TuneSettings(device="cuda", templates=everything, search="exhaustive"))
    assert "decode" not in exhaustive.pruned_counts()
    a100 = DeviceInfo(device_type="cuda", name="NVIDIA A100", capability="8.0", sm_count=108,
                      smem_per_block=166912, l2_bytes=40 << 20, total_memory=80 << 30)
    ampere = get_choices(decode, a100, TuneSettings(device="cuda", templates=everything))
    assert "decode" not in ampere.pruned_counts()  # mma.sync's M slot is 16 rows: a decode tile fills it
    rtx = DeviceInfo(device_type="cuda", name="NVIDIA GeForce RTX 5090", capability="12.0", sm_count=170,
                     smem_per_block=101376, l2_bytes=96 << 20, total_memory=32 << 30)
    assert "decode" not in get_choices(decode, rtx, TuneSettings(device="cuda", templates=everything)).pruned_counts()
    mi300 = DeviceInfo(device_type="cuda", name="AMD Instinct MI300X", capability="9.4", sm_count=304,
                       smem_per_block=65536, l2_bytes=256 << 20, total_memory=192 << 30)
    assert "decode" not in get_choices(decode, mi300, TuneSettings(device="cuda", templates=everything)).pruned_counts()
    ieee = make_problem(m=16, n=4096, k=4096, dtype="float32", layout="nt")  # no matrix instruction
    assert "decode" not in get_choices(ieee, H200, TuneSettings(device="cuda", templates=everything)).pruned_counts()
    tf32 = make_problem(m=16, n=4096, k=4096, dtype="float32", layout="nt", allow_tf32=True)
    assert "decode" in get_choices(tf32, H200, TuneSettings(device="cuda", templates=everything)).pruned_counts()
    on_cpu = make_problem(m=16, n=64, k=64, device="cpu")
    assert "decode" not in get_choices(on_cpu, CPU, TuneSettings(device="cpu", templates=everything)).pruned_counts()


def test_interpreter_cost_prunes_big_problems_on_cpu():
    small = make_problem(m=128, n=128, k=128, device="cpu")
    assert get_choices(small, CPU, TuneSettings(device="cpu")).pruned == []
    big = make_problem(m=2048, n=2048, k=2048, device="cpu")
    result = get_choices(big, CPU, TuneSettings(device="cpu", templates=("aten::mm", "triton::mm")))
    assert [c.uid for c in result.choices] == ["aten::mm"]
    assert result.pruned_counts() == {"interpreter_cost": 5}
    assert "interpreter would take" in result.pruned[0].reason
    config = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}
    assert 0.1 < interpreter_seconds(small, config, 1) < 1.0


def test_exhaustive_ranking_lets_every_template_into_the_compile_cap_on_decode():
    """On a decode shape the tile model puts most configs of every template at the HBM
    floor; ties go by each config's place in its own template's list, so every template's
    first configs make the compile cap (in template order, triton::mm_swap_ab had none)."""
    from autotune_cli.search.exhaustive import COMPILE_CAP, _modelled, rank_by_model

    problem = make_problem(m=16, n=4096, k=4096, dtype="bfloat16")
    result = get_choices(problem, H200, TuneSettings(device="cuda", search="exhaustive"))
    modelled = [c for c in result.choices if _modelled(c)]
    assert len(modelled) > COMPILE_CAP
    capped = rank_by_model(problem, modelled, H200.sm_count)[:COMPILE_CAP]
    assert {c.uid for c in capped} == {c.uid for c in modelled}
    first_swap = next(c for c in modelled if c.uid == "triton::mm_swap_ab")
    assert first_swap in capped  # the shipped list's lead (the H200 best) is compiled


def test_a_choice_its_result_and_its_compile_request_share_one_identity():
    from autotune_cli.store.entry import Winner
    from autotune_cli.store.results import Candidate, config_identity
    from autotune_cli.runner.compile_pool import compile_key

    problem = make_problem(m=64, n=64, k=64, dtype="float16", device="cpu")
    device = DeviceInfo("cpu", "cpu")
    choices = get_choices(problem, device, TuneSettings(device="cpu", templates=("triton::mm",))).choices
    choice = choices[0]
    result = Candidate(choice.uid, dict(reversed(list(choice.params.items()))), "ok", 1.0)
    assert result.identity == choice.identity == config_identity(choice.uid, choice.params)
    assert Winner(choice.uid, choice.params, 1.0, 1.0).identity == choice.identity
    assert len({c.identity for c in choices}) == len(choices)
    assert compile_key(choice)[0] == choice.identity
    again = get_choices(problem, device, TuneSettings(device="cpu", templates=("triton::mm",))).choices[0]
    assert compile_key(again) == compile_key(choice)


def test_a_misaligned_problem_leaves_out_the_plain_tiles_where_the_padded_twin_serves_it():
    """K or N off 16 elements on a GPU, default search: triton::mm's tiles are not compiled
    where triton::mm_padded (the same tiles on aligned copies) is offered; the padded tiles
    and the aten candidates stay. Not for an aligned problem, bmm (no padded twin), the
    exhaustive search, a --templates selection or the CPU."""
    odd = make_problem(m=1000, n=3000, k=777, dtype="float16")
    result = get_choices(odd, H200, TuneSettings(device="cuda"))
    dropped = [p for p in result.pruned if p.stage == "misaligned"]
    assert dropped and {p.choice.uid for p in dropped} == {"triton::mm"}
    assert "triton::mm_padded runs its tiles on aligned copies" in dropped[0].reason
    assert {c.uid for c in result.choices} == {"aten::mm", "aten::mm_aligned", "triton::mm_padded"}
    padded = {tuple(sorted(c.config_dict.items())) for c in result.choices if c.uid == "triton::mm_padded"}
    assert {tuple(sorted(p.choice.config_dict.items())) for p in dropped} <= padded  # the same tiles
    aligned = make_problem(m=1024, n=3072, k=768, dtype="float16")
    assert "misaligned" not in get_choices(aligned, H200, TuneSettings(device="cuda")).pruned_counts()
    bmm = make_problem(m=100, n=300, k=77, batch=4, dtype="float16")
    assert "misaligned" not in get_choices(bmm, H200, TuneSettings(device="cuda")).pruned_counts()
    exhaustive = get_choices(odd, H200, TuneSettings(device="cuda", search="exhaustive"))
    assert "misaligned" not in exhaustive.pruned_counts()
    chosen = get_choices(odd, H200, TuneSettings(device="cuda", templates=("triton::mm", "triton::mm_padded")))
    assert "misaligned" not in chosen.pruned_counts() and any(c.uid == "triton::mm" for c in chosen.choices)
    on_cpu = make_problem(m=10, n=30, k=7, device="cpu")
    assert "misaligned" not in get_choices(on_cpu, CPU, TuneSettings(device="cpu")).pruned_counts()


def test_an_odd_width_read_along_aligned_rows_keeps_the_plain_tiles():
    """An nn.Linear's odd output width (B stored [N, K], K a multiple of 16): the plain
    tiles load aligned rows and mask only their stores, so the default search keeps them
    beside the padded twin. With B stored [K, N] the same N leaves B's rows misaligned, and
    with A transposed an odd M leaves A's: there the plain tiles go."""
    head = make_problem(m=64, n=50257, k=768, dtype="bfloat16", layout="nt")
    assert not misaligned_loads(head)
    kept = get_choices(head, H200, TuneSettings(device="cuda"))
    assert "misaligned" not in kept.pruned_counts()
    assert {"triton::mm", "triton::mm_padded"} <= {c.uid for c in kept.choices}
    for odd in (make_problem(m=64, n=50257, k=768, dtype="bfloat16", layout="nn"),
                make_problem(m=64, n=4096, k=777, dtype="bfloat16", layout="nt"),
                make_problem(m=63, n=50257, k=768, dtype="bfloat16", layout="tt")):
        assert misaligned_loads(odd)
        pruned = get_choices(odd, H200, TuneSettings(device="cuda")).pruned
        assert {p.choice.uid for p in pruned if p.stage == "misaligned"} == {"triton::mm"}


def test_a_problem_too_large_for_the_interpreter_is_refused_with_a_size_that_fits():
    """On the CPU, a problem none of whose Triton configs the interpreter can time within the
    bound is refused (the tune would time the BLAS call alone, or run into --timeout), and
    the size it names keeps a Triton config; --templates aten is left alone."""
    import re

    import pytest

    from autotune_cli.candidates.choices import check_interpretable
    from autotune_cli.errors import UserError

    settings = TuneSettings(device="cpu")
    big = make_problem(m=1024, n=4096, k=4096, dtype="bfloat16", device="cpu")
    with pytest.raises(UserError) as raised:
        check_interpretable(big, get_choices(big, CPU, settings), settings)
    message = str(raised.value)
    assert "too large to time under Triton's interpreter" in message and "--interpreter-budget 30 s" in message
    m, n, k = map(int, re.search(r"about (\d+)x(\d+)x(\d+) fits", message).groups())
    fits = make_problem(m=m, n=n, k=k, dtype="bfloat16", device="cpu")
    kept = get_choices(fits, CPU, settings)
    assert any(c.template.backend == "triton" for c in kept.choices)
    check_interpretable(fits, kept, settings)  # not refused
    aten_only = TuneSettings(device="cpu", templates=("aten",))
    check_interpretable(big, get_choices(big, CPU, aten_only), aten_only)
    # --timeout under the budget is the bound: a config past it would only time out
    short = TuneSettings(device="cpu", timeout_s=1.0)
    mid = make_problem(m=256, n=256, k=256, device="cpu")
    assert get_choices(mid, CPU, settings).choices != get_choices(mid, CPU, short).choices
    batched = make_problem(m=64, n=64, k=64, batch=4096, device="cpu")
    with pytest.raises(UserError, match=r"about \d+x64x64x64 fits"):
        check_interpretable(batched, get_choices(batched, CPU, settings), settings)


def test_the_readmes_gpu_example_on_the_cpu_is_refused_at_once(cli, cache_dir):
    code, out, err = cli("mm", "--m", 1024, "--n", 4096, "--k", 4096, "--dtype", "bfloat16", "--device", "cpu")
    assert code == 2 and out == "" and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("autotune: error: mm 1024x4096x4096 bfloat16 nn is too large")
    assert not (cache_dir / "autotune-cache.json").exists()


def test_an_estimate_under_a_second_reads_as_its_value_not_zero():
    """A small --interpreter-budget: the estimate over it says how far over (~0.023 s), never
    ~0 s; the prune reasons likewise."""
    import re

    import pytest

    from autotune_cli.candidates.choices import check_interpretable, interpreter_runs, interpreter_seconds
    from autotune_cli.errors import UserError

    settings = TuneSettings(device="cpu", interpreter_budget_s=0.001)
    problem = make_problem(m=64, n=48, k=32, device="cpu")
    chosen = get_choices(problem, CPU, settings)
    with pytest.raises(UserError) as raised:
        check_interpretable(problem, chosen, settings)
    said = float(re.search(r"would take ~([0-9.e+-]+) s, over --interpreter-budget 0.001 s", str(raised.value))[1])
    cheapest = min(interpreter_seconds(problem, p.choice.config_dict, interpreter_runs(settings))
                   for p in chosen.pruned if p.stage == "interpreter_cost")
    assert said > 0.001 and abs(said - cheapest) <= 0.05 * cheapest
    reasons = [p.reason for p in chosen.pruned if p.stage == "interpreter_cost"]
    assert reasons and not any("~0 s" in reason for reason in reasons)
