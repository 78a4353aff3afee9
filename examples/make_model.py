import torch

model = torch.nn.Sequential(
    torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64)
).half().eval()
x = torch.randn(32, 64, dtype=torch.float16)
torch.export.save(torch.export.export(model, (x,)), "mlp.pt2")
batch = torch.export.Dim("batch", max=4096)  # the batch size dynamic:
dyn = torch.export.export(model, (x,), dynamic_shapes=({0: batch},))
torch.export.save(dyn, "dyn.pt2")
torch.jit.save(torch.jit.trace(model, x), "mlp.pt")  # TorchScript
