"""Register budgets (autotune_cli/hardware/registers.py): one per GPU model, read by the
register prune stage, the heuristics and the tile model."""

from dataclasses import replace

from autotune_cli.candidates.choices import get_choices
from autotune_cli.hardware import registers
from autotune_cli.hardware.registers import NVIDIA, RegisterBudget, register_budget
from autotune_cli.hardware.roofline import tile_seconds
from autotune_cli.heuristics import gemv, triton_scaled_mm
from autotune_cli.problem import make_problem
from autotune_cli.settings import TuneSettings
from helpers_devices import A100, H200

BIG = make_problem(m=4096, n=4096, k=4096, dtype="bfloat16")


def test_a_model_gets_its_architectures_budget_and_an_unknown_one_the_default(monkeypatch):
    hopper = RegisterBudget(accumulator=96)
    monkeypatch.setitem(registers.BUDGETS, 9, hopper)
    assert register_budget(H200) is hopper
    assert register_budget(A100) is registers.BUDGETS[8]
    assert register_budget(replace(H200, capability="")) is NVIDIA  # capability not known
    assert register_budget(replace(H200, capability="99.0")) is NVIDIA  # an architecture not listed
    assert register_budget() is NVIDIA


def test_the_heuristics_hold_their_tiles_to_the_default_budget():
    assert triton_scaled_mm.MAX_ACC_REGISTERS == NVIDIA.scaled_accumulators
    assert gemv.PER_THREAD == {gemv.FMA: NVIDIA.gemv_fma, gemv.EACH: NVIDIA.gemv_each}
    # a GEMV tile is fitted to it: 16 rows x 256 x 256 over 4 warps halves until it fits
    block_n, block_k = gemv.fit_tile(gemv.FMA, 16, 256, 256, 4, True)
    assert 16 * block_n * block_k <= NVIDIA.gemv_fma * 32 * 4 < 16 * 256 * 256


def test_the_register_stage_prunes_by_the_devices_budget(monkeypatch):
    settings = TuneSettings(device="cuda", search="exhaustive", templates=("triton::mm",))

    def kept_per_thread():
        choices = get_choices(BIG, H200, settings)
        per_thread = [c.config_dict["BLOCK_M"] * c.config_dict["BLOCK_N"] // (32 * c.config_dict["num_warps"])
                      for c in choices.choices]
        return choices.pruned_counts().get("registers", 0), max(per_thread)

    pruned, most = kept_per_thread()
    assert pruned > 0 and most <= NVIDIA.accumulator
    monkeypatch.setitem(registers.BUDGETS, 9, RegisterBudget(accumulator=64))
    tighter, most = kept_per_thread()
    assert tighter > pruned and most <= 64


def test_the_tile_model_slows_tiles_past_the_budgets_knee():
    big_tile = {"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 4}
    default = tile_seconds(BIG, big_tile, 132)
    assert tile_seconds(BIG, big_tile, 132, NVIDIA) == default
    assert tile_seconds(BIG, big_tile, 132, RegisterBudget(efficient_accumulator=64)) > default
