"""Devices the tests describe without having them (DeviceInfo as the probe would fill it in):
the choices, the templates' availability checks and the heuristics are decided by these."""

from autotune_cli.hardware.device import DeviceInfo

H200 = DeviceInfo(device_type="cuda", name="NVIDIA H200", capability="9.0", sm_count=132,
                  smem_per_block=232448, l2_bytes=60 << 20, total_memory=140 << 30)
A100 = DeviceInfo(device_type="cuda", name="NVIDIA A100-SXM4-80GB", capability="8.0", sm_count=108,
                  smem_per_block=166912, l2_bytes=40 << 20, total_memory=80 << 30)
L40S = DeviceInfo(device_type="cuda", name="NVIDIA L40S", capability="8.9", sm_count=142,
                  smem_per_block=101376, l2_bytes=96 << 20, total_memory=48 << 30)
CPU = DeviceInfo(device_type="cpu", name="cpu")
