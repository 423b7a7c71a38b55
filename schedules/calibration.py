"""The constants of the dispatcher's model (schedules.dispatch). This file is written by
``schedlab calibrate`` from a calibration sweep (``schedlab sweep --set calibration``); the values
below are the ones it wrote, with the sweep they came from named in ``source``.

Before a calibration sweep has run they are first estimates from single measurements on an H200
(per-SM peaks = cuBLAS at 4096³-8192³ / 132 SMs; efficiencies = the lab's kernels' share of them)."""

CALIBRATION = {
    "source": "first estimates (H200 measurements of 2026-11-22/23), not yet fitted to a sweep",
    "launch_us": 2.5,            # one kernel's fixed cost, GPU-side (event to event)
    "w_sat": 8,                  # warps per SM that hide the latencies of a SIMT kernel
    "l2_factor": 3.0,            # L2→SM bandwidth as a multiple of DRAM bandwidth
    "fp32_sm_tflops": 0.389,     # fp32 FMA peak per SM (cuBLAS 8192³: 51.3 TFLOP/s / 132)
    "tc16_sm_tflops": 5.74,      # fp16/bf16 tensor cores per SM (cuBLAS 4096³: 758 TFLOP/s / 132)
    "tf32_sm_tflops": 3.03,      # tf32 tensor cores per SM (cuBLAS TF32 4096³: 400 TFLOP/s / 132)
    "sm_store_gbps": 60.0,       # what one SM's epilogue writes per second (GB/s)
    "copy_factor": {"16": 1.0, "8": 0.85, "4": 0.6, "2": 0.3},  # cp.async copies narrower than 16 bytes
    "regs": {"t8x8": 128, "t8x4": 96, "t4x8": 96, "t4x4": 64, "tma": 168, "tma_small": 154, "cp": 168,
             "cp_tf32": 128, "tma_tf32": 168},
    "default_efficiency": {"simt": 0.8, "gemv": 0.8, "tma": 0.9, "tma_small": 0.8, "cp": 0.7, "tma_tf32": 0.95,
                           "cp_tf32": 0.55},
    "efficiency": {
        "simt 128x128 t8x8": 0.93, "tma 128x256": 0.95, "cp 128x256": 0.70, "cp_tf32 256x128": 0.55,
        "tma_tf32 256x128": 1.0,
    },
}
