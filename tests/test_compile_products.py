"""inner, tensordot and multi_dot under autotune_cli.compile (routing/composite.py): each
becomes the mm calls torch runs for it, the problems `record` lists, routed as any mm;
torch's values."""

from __future__ import annotations

import pytest
import torch

from autotune_cli.model.shapes_file import read_listed
from conftest import recorded_and_compiled

pytestmark = pytest.mark.usefixtures("fresh_compile")


class Products(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(24, 32), requires_grad=False)
        self.c = torch.nn.Parameter(torch.randn(32, 48), requires_grad=False)

    def forward(self, x):
        return (torch.inner(x, self.w), x.inner(self.w), torch.tensordot(x, self.c, dims=1),
                torch.tensordot(x.reshape(2, 4, 32), self.c, dims=([2], [0])),
                torch.linalg.multi_dot([x, self.c, self.c.t()]),
                torch.linalg.multi_dot([x[0], self.c, self.c.t(), self.w.t()]),
                torch.linalg.multi_dot([x[0], self.c, self.c.t(), x[1]]),  # two vectors: a scalar
                torch.inner(x[0], x[1]))  # every dim summed: a dot, the compiler's


def problems(listed) -> list[tuple]:
    return sorted((p.m, p.n, p.k, p.layout) for p, count, _ in listed for _ in range(count))


@pytest.mark.parametrize("exported", [False, True], ids=["model", "exported"])
def test_composite_products_are_routed_as_the_mm_calls_torch_runs(tmp_path, cli, cache_dir, exported):
    """Dynamo's graph calls torch's functions; an exported program's module, their aten ops."""
    model, x = Products().eval(), torch.randn(8, 32)
    if exported:
        model = torch.export.export(model, (x,)).module()
    want, got, routes, path = recorded_and_compiled(cli, tmp_path, model, x)
    for value, expected in zip(got, want):
        assert torch.equal(value, expected)
    routed = [r for r in routes if not r.fallback]
    assert [r.reason for r in routes if r.fallback] == ["a product routing does not read (inner)"]
    assert sorted((r.problem.m, r.problem.n, r.problem.k, r.problem.layout) for r in routed) == \
        problems(read_listed(path, "cpu"))
