"""Every table is readable at 80 columns and wider: no line past the width, no number or
uid cut or folded, nothing elided. Drawn through rich as the CLI's console draws them."""

from __future__ import annotations

import io
import re

import pytest
from rich.cells import cell_len
from rich.console import Console

from autotune_cli.store.entry import Entry
from autotune_cli.tune.hits import TuneOutcome
from autotune_cli.problem import make_problem
from autotune_cli.tune.report import fmt_ms, fmt_tflops, tuned_text
from autotune_cli.cli.tables import FitTable, cache_table, model_summary_table, outcome_table, plan_table
from autotune_cli.store.results import Candidate, params_str

WIDTHS = (80, 120)

# what an H200 tune shows: the longest uids and params there are, numbers of every size
CANDIDATES = [
    ("triton::mm_persistent_tma", {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8,
                                   "num_stages": 4, "num_warps": 8, "FLATTEN": 1}, 0.412345),
    ("aten::mm", {}, 0.43210),
    ("triton::mm_splitk", {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8,
                           "num_stages": 3, "num_warps": 4, "SPLIT_K": 16, "ATOMIC_ADD": 1,
                           "FUSED_REDUCE": 0}, 12.3456),
    ("triton::mm_swap_ab", {"BLOCK_M": 32, "BLOCK_N": 256, "BLOCK_K": 128, "num_stages": 5,
                            "num_warps": 8}, 123.456),
    ("triton::mm_padded", {"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8,
                           "num_stages": 3, "num_warps": 8}, 1234.5678),
]
GPU = {"device_type": "cuda", "device_name": "NVIDIA H200", "capability": "9.0", "sm_count": 132,
       "driver": "570.86", "runtime": "12.8", "torch": "2.13.0", "triton": "3.9.0", "templates": {}}


def draw(renderable, width: int) -> str:
    """As the command's consoles (cli.console.out, .err) draw: soft wrap on, no highlighting."""
    console = Console(width=width, file=io.StringIO(), soft_wrap=True, highlight=False,
                      color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def assert_fits(text: str, width: int, whole: list[str]) -> None:
    lines = text.splitlines()
    too_wide = [line for line in lines if cell_len(line) > width]
    assert not too_wide, f"lines wider than {width}:\n" + "\n".join(too_wide)
    assert "…" not in text, text
    cells = [cell.strip() for line in lines for cell in re.split(r"[│┃]", line)]
    tokens = {word for cell in cells for word in cell.split()} | set(cells)
    cut = [value for value in whole if value not in tokens]
    assert not cut, f"cut or folded at {width}: {cut}\n{text}"


def outcome(from_cache=False) -> TuneOutcome:
    problem = make_problem(m=4096, n=14336, k=4096, dtype="bfloat16", device="cuda")
    candidates = [{"uid": uid, "params": params, "ms": ms, "status": "ok"}
                  for uid, params, ms in CANDIDATES]
    candidates.append({"uid": "triton::mm_persistent_tma", "params": CANDIDATES[0][1], "ms": None,
                       "status": "compile_error"})
    winner = {**candidates[0], "tflops": problem.tflops(candidates[0]["ms"])}
    entry = Entry.from_dict({"problem": problem.to_dict(), "fingerprint": GPU, "winner": winner,
                             "candidates": candidates, "tuned_at": "2026-11-30T21:04:05+00:00",
                             "tune_seconds": 93.2})
    return TuneOutcome(problem=problem, key="k", entry=entry, from_cache=from_cache)


def model_rows() -> list[dict]:
    rows = []
    for i, (uid, params, ms) in enumerate(CANDIDATES):
        problem = make_problem(m=8 * 10 ** i, n=50257, k=768, dtype="float16", layout="nt",
                               bias="n" if i % 2 else None, device="cuda")
        aten = ms * 4.1
        rows.append({"describe": problem.describe(), "count": 12 if i else 1,
                     "winner": {"uid": uid, "params": params, "ms": ms}, "aten_ms": aten,
                     "saved_ms": (aten - ms) * (12 if i else 1), "from_cache": bool(i % 2)})
    return rows


def model_numbers(rows, aten=True) -> list[str]:
    return [value for row in rows for value in (
        fmt_ms(row["winner"]["ms"]), fmt_ms(row["saved_ms"]), f"{row['aten_ms'] / row['winner']['ms']:.2f}x",
        *([fmt_ms(row["aten_ms"])] if aten else []))]


@pytest.mark.parametrize("width", WIDTHS)
def test_mm_table_fits(width):
    result = outcome()
    text = draw(outcome_table(result), width)
    numbers = [fmt_ms(ms) for _, _, ms in CANDIDATES]
    numbers += [fmt_tflops(result.problem.tflops(ms)) for _, _, ms in CANDIDATES]
    numbers += [f"{100 * CANDIDATES[0][2] / ms:.0f}%" for _, _, ms in CANDIDATES]
    assert_fits(text, width, numbers + [uid for uid, _, _ in CANDIDATES] + ["compile_error"])
    assert text.count("winner") == 1


@pytest.mark.parametrize("width", WIDTHS)
def test_model_winners_table_fits(width):
    rows = model_rows()
    text = draw(model_summary_table(rows), width)
    # at 80 the aten time gives way (the speed-up says it); every other number stays
    assert_fits(text, width, model_numbers(rows, aten=width >= 120) + [uid for uid, _, _ in CANDIDATES])
    headers = " ".join(line for line in text.splitlines() if line.startswith("┃"))
    assert ("aten" in headers) == (width >= 120) and "saved/pass" in headers


@pytest.mark.parametrize("width", WIDTHS)
def test_model_table_keeps_count_and_cache_when_narrow(width):
    text = draw(model_summary_table(model_rows()), width)
    assert "12" in text.split() and ("cached" in text)


@pytest.mark.parametrize("width", WIDTHS)
def test_plan_table_fits(width):
    rows = [{"describe": r["describe"], "count": r["count"], "gflop": 2 * 8 * 50257 * 768 / 1e9,
             "share": 0.2, "sources": ["aten.linear", "aten.mm"], "hint": {"s77": [1, 16, 128]}}
            for r in model_rows()]
    assert_fits(draw(plan_table(rows), width), width, ["0.618", "20.0%", "12"])


def cache_items() -> list[tuple[str, Entry]]:
    items = []
    for i, (uid, params, ms) in enumerate(CANDIDATES):
        problem = make_problem(m=64 << i, n=4096, k=4096, dtype="bfloat16", device="cuda")
        fp = GPU if i % 2 == 0 else {**GPU, "device_type": "cpu", "device_name": "AMD EPYC 9654"}
        entry = Entry.from_dict({"problem": problem.to_dict(), "fingerprint": fp,
                                 "machine": "here" if i == 1 else "other",
                                 "winner": {"uid": uid, "params": params, "ms": ms, "tflops": problem.tflops(ms)},
                                 "candidates": [], "tuned_at": f"2026-11-0{i + 1}T1{i}:05:06+00:00"})
        items.append((problem.key() + "@d", entry))
    return items


@pytest.mark.parametrize("width", WIDTHS)
def test_cache_table_fits(width):
    items = cache_items()
    numbers = [fmt_ms(e.winner.ms) for _, e in items]
    numbers += [fmt_tflops(e.winner.tflops) for _, e in items]
    text = draw(cache_table(items, current_machine="here"), width)
    assert_fits(text, width, numbers + [e.winner.uid for _, e in items] + ["2026-11-01"])
    assert "NVIDIA H200" in text or ("NVIDIA" in text and "H200" in text)


@pytest.mark.parametrize("width", WIDTHS)
def test_cache_table_fits_whatever_finite_numbers_the_file_holds(width):
    """Times and rates are any finite number a cache file holds (a hand edit): written with
    an exponent where large, every table still fits and shows them whole."""
    items = []
    for i, (ms, tflops) in enumerate(((1e308, 1e308), (5e-324, 1e-300), (12345678.9, 2.5e7))):
        problem = make_problem(m=64 << i, n=4096, k=4096, dtype="bfloat16", device="cuda")
        entry = Entry.from_dict({"problem": problem.to_dict(), "fingerprint": GPU, "candidates": [],
                                 "winner": {"uid": "aten::mm", "params": {}, "ms": ms, "tflops": tflops},
                                 "tuned_at": "2026-11-01T10:05:06+00:00"})
        items.append((problem.key() + "@d", entry))
    numbers = [fmt_ms(e.winner.ms) for _, e in items] + [fmt_tflops(e.winner.tflops) for _, e in items]
    assert max(map(len, numbers)) <= 10 and "1e+308" in numbers and "2.5e+07" in numbers
    assert_fits(draw(cache_table(items), width), width, numbers)


def test_cache_table_says_where_measured_when_narrow():
    text = draw(cache_table(cache_items(), current_machine="here"), 80)
    assert "measured here" in text or re.search(r"\byes\b", text)
    assert "elsewhere" in text or re.search(r"\bno\b", text)


@pytest.mark.parametrize("width", range(70, 201, 7))
def test_no_number_is_cut_at_any_common_width(width):
    """Between the two widths too: each table picks a layout for the width it is drawn at."""
    rows = model_rows()
    assert_fits(draw(model_summary_table(rows), width), width, model_numbers(rows, aten=False))
    assert_fits(draw(outcome_table(outcome()), width), width, [fmt_ms(ms) for _, _, ms in CANDIDATES])
    items = cache_items()
    assert_fits(draw(cache_table(items), width), width, [fmt_ms(e.winner.ms) for _, e in items])


def test_wide_tables_keep_a_column_per_field():
    """With room, nothing is folded together: the winners' params have their own column.
    One tune's candidates are the exception: `kernel` (its params under the uid) at every
    width, the columns README's "Reading the output" names."""
    for width in (80, 200):
        text = draw(outcome_table(outcome()), width)
        header = next(line for line in text.splitlines() if "#" in line)
        assert "kernel" in header and "params" not in header and "template" not in header, text
    assert params_str(CANDIDATES[0][1]) in text  # at 200, on one line under its uid
    text = draw(model_summary_table(model_rows()), 200)
    assert "params" in text and "aten ms" in text and "saved/pass ms" in text


def test_tuned_text():
    assert tuned_text("2026-11-30T21:04:05+00:00") == "2026-11-30 21:04"
    assert tuned_text("2026-11-30T23:04:05+02:00") == "2026-11-30 21:04"  # shown in UTC
    assert tuned_text("not a date") == "not a date"
    assert tuned_text(None) == "?"


def test_a_table_narrower_than_its_least_folds_text_not_numbers():
    """At 60 columns even the narrowest layout wraps words: numbers still stay whole."""
    rows = model_rows()
    text = draw(model_summary_table(rows), 60)
    assert all(cell_len(line) <= 60 for line in text.splitlines())
    assert "…" not in text
    assert isinstance(model_summary_table(rows), FitTable)


def run_on_terminal(args, columns: int, env: dict, frames: bool = False) -> str:
    """The CLI on a pseudo-terminal `columns` wide (as a user's terminal), its screen text
    (`frames`: each redraw of a line, a progress bar's, on a line of its own)."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in {**os.environ, **env}.items() if k not in ("COLUMNS", "LINES")}
    try:
        proc = subprocess.Popen([sys.executable, "-m", "autotune_cli", *args], stdin=follower,
                                stdout=follower, stderr=follower, env=env, close_fds=True)
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: the command is done
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait(timeout=120) == 0, b"".join(chunks).decode(errors="replace")
    finally:
        os.close(leader)
    text = b"".join(chunks).decode().replace("\r\n", "\n")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07", "", text)
    return text.replace("\r", "\n" if frames else "")


def test_cache_show_on_an_80_column_terminal(tmp_path):
    """A real terminal of 80 columns, not the piped default: what a user sees fits it."""
    from test_cache_tools import TRITON_PARAMS, synthetic, write

    items = [synthetic(m=m, uid=uid, params=TRITON_PARAMS if uid.startswith("triton") else None,
                       ms=ms, device_name=name)
             for m, uid, ms, name in ((64, "triton::mm_persistent_tma", 0.012345, "NVIDIA H200"),
                                      (4096, "aten::mm", 1234.5678, "NVIDIA A100-SXM4-80GB"))]
    write(tmp_path, *items)
    screen = run_on_terminal(["cache", "show"], 80, {"AUTOTUNE_CACHE_DIR": str(tmp_path)})
    table, prose = screen.split("fingerprint ", 1)
    assert_fits(table, 80, ["0.0123", "1234.6", "triton::mm_persistent_tma", "aten::mm"])
    assert "2026-11-20" in table
    # the fingerprint lines wrap at words to the terminal, not mid-word by the terminal
    assert all(len(line.rstrip()) <= 80 for line in prose.splitlines()), prose
    words = " ".join(prose.split())
    assert "templates triton::mm_persistent_tma=" in words or "templates aten::mm=" in words, words


def test_a_tune_on_an_80_column_terminal(tmp_path):
    """`autotune mm` of a float8 decode problem (the longest description there is) on a real
    80-column terminal: the progress lines wrap at words, the candidates table and the
    winner fit, nothing cut mid-uid."""
    screen = run_on_terminal(["mm", "--m", "8", "--n", "64", "--k", "64", "--dtype", "float8_e4m3fn",
                              "--scale", "row", "--device", "cpu", "--templates", "aten,triton::scaled_gemv"],
                             80, {"AUTOTUNE_CACHE_DIR": str(tmp_path)}, frames=True)
    lines = [line.rstrip() for line in screen.splitlines()]
    assert all(cell_len(line) <= 80 for line in lines), "\n".join(line for line in lines if cell_len(line) > 80)
    words = " ".join(screen.split())
    assert "tuning scaled_mm 8x64x64 float8_e4m3fn row-scaled->bfloat16 nt on cpu: 3 candidates" in words, words
    assert "triton::scaled_gemv" in words and "winner: aten::_scaled_mm" in words


def _configs_of(template, problem):
    """What a tune of `problem` may time with `template`: its heuristic's configs (default and
    exhaustive search), and each of those with one --space choice (a Choice param) changed."""
    from autotune_cli.heuristics.registry import lookup_heuristic
    from autotune_cli.templates.params import Choice

    heuristic = lookup_heuristic(template.uid, problem.device, problem.op)
    offered = [c for search in ("default", "exhaustive") for c in heuristic.get_configs(problem, search)]
    choices = {name: kind.values for name, kind in template.params_schema.items() if isinstance(kind, Choice)}
    for config in offered[:3] or [{}]:
        for name, values in choices.items():
            offered += [{**config, name: value} for value in values]
    for config in offered:
        try:
            yield template.full_params(problem, config)
        except (ValueError, KeyError):  # a combination the template refuses
            pass


def test_distinct_configs_of_every_template_read_differently():
    """A table row, the winner's line and `cache show` name a config by params_str alone: two
    configs of one template that differ must not read the same (aten::mm_aligned's six once
    read as six bare `aten::mm_aligned` rows)."""
    import autotune_cli.heuristics  # noqa: F401  (registers the built-in heuristics)
    from autotune_cli.problem import SCALES
    from autotune_cli.store.results import config_identity
    from autotune_cli.templates import all_templates

    problems = []
    for device in ("cpu", "cuda"):
        for m, n, k in [(4, 4, 4), (1, 4096, 4096), (64, 48, 32), (4096, 4096, 4096), (8, 8192, 2048),
                        (2048, 16, 8192), (1000, 50257, 777)]:
            for dtype in ("float16", "bfloat16", "float32"):
                problems += [make_problem(m=m, n=n, k=k, dtype=dtype, device=device),
                             make_problem(m=m, n=n, k=k, dtype=dtype, device=device, bias="n"),
                             make_problem(m=m, n=n, k=k, dtype=dtype, device=device, batch=4)]
            for scale in SCALES:
                if scale != "block" or (k % 128 == 0 and n % 128 == 0):
                    problems.append(make_problem(m=m, n=n, k=k, dtype="float8_e4m3fn", scale=scale, device=device))
    templates = [t for t in all_templates() if type(t).__module__.startswith("autotune_cli.")]
    varied = set()
    for template in templates:
        for problem in problems:
            if not template.supports(problem):
                continue
            read_as: dict[str, tuple] = {}
            for params in _configs_of(template, problem):
                text, identity = params_str(params), config_identity(template.uid, params)
                assert read_as.setdefault(text, identity) == identity, \
                    f"{template.uid} on {problem.describe()}: {dict(identity[1])} and {dict(read_as[text][1])} " \
                    f"both read {text!r}"
                if len(read_as) > 1:
                    varied.add(template.uid)
    assert {"aten::mm_aligned", "triton::gemv", "triton::scaled_mm_persistent_tma"} <= varied


def test_top_bounds_the_rows_and_the_skipped_are_one_line():
    """--top is every row there is: the fastest, then the failures worth seeing; the skipped
    (the budget's, the search's) are counted under the table, never listed."""
    from autotune_cli.store.results import BUDGET_RAN_OUT

    result = outcome()
    tile = CANDIDATES[0][1]
    extra = [Candidate(uid="triton::mm", params={**tile, "BLOCK_K": 16 * (i + 1)}, status="skipped",
                       error=BUDGET_RAN_OUT) for i in range(7)]
    extra += [Candidate(uid="triton::mm", params={**tile, "num_warps": 2 ** i}, status="skipped",
                        error="ranked below the top 10 by the tile model") for i in range(3)]
    extra.append(Candidate(uid="triton::mm", params={**tile, "GROUP_M": 4}, status="timeout", error="hung"))
    entry = Entry.from_dict({**result.entry.to_dict(),
                             "candidates": [c.to_dict() for c in (*result.entry.candidates, *extra)]})
    result = TuneOutcome(problem=result.problem, key="k", entry=entry, from_cache=False)

    def rows(text):
        return [line for line in text.splitlines() if re.match(r"│ +(\d+|-) +│", line)]

    one = draw(outcome_table(result, top=1), 120)
    assert len(rows(one)) == 1 and "skipped" not in one
    assert one.splitlines()[-3:] == ["not listed: 1 compile error, 1 timeout (--top, --json)",
                                     "7 not timed: the tuning budget ran out",
                                     "3 passed over by the search (--json says why)"]
    seven = draw(outcome_table(result, top=7), 120)
    statuses = [row.split("│")[-2].strip() for row in rows(seven)]
    assert statuses == ["ok, winner", "ok", "ok", "ok", "ok", "compile_error", "timeout"]
    assert len(rows(draw(outcome_table(result, top=20), 120))) == 7


def test_a_tune_whose_candidates_were_all_skipped_draws_no_empty_grid():
    """Every candidate left by --budget or passed over: no row to show, so the title and the
    lines that count them, not a header over nothing."""
    from autotune_cli.store.results import BUDGET_RAN_OUT

    result = outcome()
    skipped = [Candidate(uid=uid, params=params, status="skipped", error=BUDGET_RAN_OUT)
               for uid, params, _ in CANDIDATES]
    data = {**result.entry.to_dict(), "winner": None, "candidates": [c.to_dict() for c in skipped]}
    empty = TuneOutcome(problem=result.problem, key="k", entry=Entry.from_dict(data), from_cache=False)
    text = draw(outcome_table(empty), 80)
    assert text.splitlines() == [f"{result.problem.describe()} on NVIDIA H200",
                                 f"{len(CANDIDATES)} not timed: the tuning budget ran out"], text
