import torch, traceback, tempfile
from autotune_cli.problem import make_problem
from autotune_cli.templates import get_template
from autotune_cli.bench.verify import make_operands, reference, check
kd = tempfile.mkdtemp()
for n in (50257, 4112, 3000):
    p = make_problem(m=2048, n=n, k=768, dtype="float16", device="cuda")
    t = get_template("triton::mm_padded")
    for cfg in ({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 2, "num_warps": 4},
                {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_stages": 3, "num_warps": 8}):
        try:
            params = t.full_params(p, cfg); run = t.build(p, params, kd)
            ops = make_operands(p, 0, "cuda", t.out_pitch(p, params)); ref = reference(p, ops); run(ops); torch.cuda.synchronize()
            print(n, cfg["BLOCK_N"], "ok", check(p, ops.out, ref).ok, flush=True)
        except Exception as e:
            print(n, cfg["BLOCK_N"], "FAIL", str(e).splitlines()[:2], flush=True); raise SystemExit
