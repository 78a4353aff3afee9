"""hardware/: the machine a tune runs on. device.py reads the device's identity and limits
(from the driver through cuda_probe.py, remembered between commands by gpu_memo.py, else from
torch); roofline.py holds the peak rates and the fastest a problem could run at them;
registers.py the per-thread register budgets of each GPU model; ptxas.py the assembler
every process builds Triton kernels with (the one Inductor uses).

Imports only the package root's modules (errors, safe_read, problem): everything above reads
the hardware, the hardware reads nothing above it.
"""
