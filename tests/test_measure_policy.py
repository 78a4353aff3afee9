"""settings.MeasurePolicy: one home for how candidates are timed, the environment's switches
read once in the command's process and handed to the workers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autotune_cli.hardware.device import probe_device
from autotune_cli.problem import make_problem
from autotune_cli.hardware.roofline import floor_seconds
from autotune_cli.settings import CPU_TIMING, MeasurePolicy, Switches, TimingPolicy, TuneSettings

DECODE = make_problem(m=8, n=4096, k=4096, dtype="bfloat16", device="cuda")  # floor ~16 us
LARGE = make_problem(m=4096, n=4096, k=4096, dtype="bfloat16", device="cuda")


def test_a_tiny_problem_is_timed_by_graph_on_a_gpu_only():
    measure = MeasurePolicy()
    assert floor_seconds(DECODE) * 1e6 < measure.graph_below_us < floor_seconds(LARGE) * 1e6
    assert measure.timing_for(DECODE, "cuda").mode == "graph"
    assert measure.timing_for(LARGE, "cuda").mode == "events"
    assert measure.timing_for(DECODE, "cpu").mode == "events"
    assert measure.for_problem(DECODE, "cuda").timing == replace(measure.timing, mode="graph",
                                                                 give_up_over=measure.give_up_over)
    assert replace(measure, graph_below_us=1e12).timing_for(LARGE, "cuda").mode == "graph"


def test_the_rounds_derive_from_the_first_timing():
    """Screening, re-timing and the sustained confirmation keep the first timing's mode (a
    problem timed by graph is timed so in every round) and scale its runs."""
    measure = MeasurePolicy().for_problem(DECODE, "cuda")
    assert {measure.screening().mode, measure.retiming().mode, measure.sustained().mode} == {"graph"}
    assert (measure.retiming().min_runs, measure.retiming().max_runs) == (15, 150)
    assert measure.screening().max_runs == 10 and measure.sustained().budget_ms == 200.0


def test_the_device_sets_the_defaults_and_knobs_override_them():
    cpu, gpu = MeasurePolicy.for_device("cpu", Switches()), MeasurePolicy.for_device("cuda", Switches())
    assert (cpu.timing, cpu.retime_passes, cpu.confirm_passes) == (CPU_TIMING, 1, 0)
    assert (gpu.timing, gpu.retime_passes, gpu.confirm_passes) == (TimingPolicy(), 4, 4)
    assert MeasurePolicy.for_device("cpu", Switches(), confirm_passes=2).confirm_passes == 2
    with pytest.raises(ValueError):
        MeasurePolicy(retime_passes=0)


def test_the_switches_are_read_when_the_settings_are_made(monkeypatch, tmp_path):
    """Changing the environment after the settings were made changes nothing: the workers
    take the switches the settings hold."""
    monkeypatch.setenv("AUTOTUNE_OFFLINE_COMPILE", "0")
    monkeypatch.setenv("AUTOTUNE_START_METHOD", "spawn")
    settings = TuneSettings(device="cpu", cache_dir=tmp_path)
    monkeypatch.setenv("AUTOTUNE_OFFLINE_COMPILE", "1")
    monkeypatch.delenv("AUTOTUNE_START_METHOD")
    assert settings.measure.switches == Switches(warm_triton="steps", offline_compile=False, start_method="spawn")
    assert TuneSettings(device="cpu", cache_dir=tmp_path).measure.switches == Switches()


def test_the_executor_starts_its_workers_with_the_settings_switches(monkeypatch, tmp_path):
    """The start method, and the switches each worker process is handed, are the settings'
    (a GPU executor is only made here, nothing is started); a task sent without a timing gets
    the problem's own first timing, graph mode included."""
    from autotune_cli.candidates.choices import get_choices
    from autotune_cli.runner.executor import LocalExecutor

    switches = Switches(warm_triton="0", offline_compile=False, start_method="spawn")
    monkeypatch.setenv("AUTOTUNE_START_METHOD", "forkserver")
    gpu = replace(probe_device("cpu"), device_type="cuda", name="stand-in", sm_count=132)
    settings = TuneSettings(device="cuda", cache_dir=tmp_path, templates=("aten::mm",), compile_workers=1,
                            measure=MeasurePolicy.for_device("cuda", switches))
    executor = LocalExecutor(gpu, settings)
    assert executor.ctx.get_start_method() == "spawn"
    assert {w.switches for w in executor.timers + executor.compilers} == {switches}
    (choice,) = get_choices(DECODE, gpu, settings).choices
    assert executor._task(choice, 0, None, "measure").timing.mode == "graph"
