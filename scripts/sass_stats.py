"""Count the machine instructions (SASS) of one schedule's kernel, whole and in its main loop:

    python3 scripts/sass_stats.py tensor_core_gemm gemm:4096x4096x4096:float16 [--param NAME=VALUE] [--out DIR]

The kernel is built as ``schedlab run`` builds it (no GPU needed: the lab compiles the CUDA source
itself); the cubin is disassembled with the toolkit's ``cuobjdump -sass`` (or ``nvdisasm``). The main
loop is the backward branch's range that holds the most instructions of the busiest kind
(HGMMA for warpgroup MMA, HMMA for tensor cores, FFMA otherwise). What the counts say: how many of the loop's instructions
do the arithmetic, and how many feed it (shared loads, async copies, barriers, integer address
arithmetic).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

GROUPS = {
    "tensor core (HMMA, HGMMA)": ("HMMA", "HGMMA"),
    "warpgroup MMA sync (WARPGROUP.ARRIVE/DEPBAR)": ("WARPGROUP",),
    "fp32 FMA/MUL/ADD": ("FFMA", "FMUL", "FADD"),
    "shared loads (LDS, LDSM)": ("LDS", "LDSM"),
    "shared stores (STS)": ("STS",),
    "async copies (LDGSTS) + their fences": ("LDGSTS", "LDGDEPBAR", "DEPBAR"),
    "TMA bulk tensor copies (UTMALDG, UTMASTG, UTMAPF, UBLKCP)": ("UTMALDG", "UTMASTG", "UTMAPF", "UBLKCP",
                                                                  "UTMACCTL", "UTMACMDFLUSH"),
    "mbarriers (SYNCS: init, arrive, expect-tx, try-wait)": ("SYNCS",),
    "register reallocation (USETMAXREG)": ("USETMAXREG",),
    "cluster barriers (UCGABAR)": ("UCGABAR_ARV", "UCGABAR_WAIT"),
    "global loads/stores (LDG, STG)": ("LDG", "STG"),
    "barriers (BAR)": ("BAR",),
    "integer/address (IMAD, IADD3, VIADD, LEA, SHF, LOP3, ISETP ...)": (
        "IMAD", "IADD3", "VIADD", "LEA", "SHF", "LOP3", "ISETP", "IABS", "SEL", "IMNMX", "VIMNMX", "SGXT", "PRMT"),
    "moves (MOV, S2R, CS2R, R2UR, ULDC ...)": ("MOV", "S2R", "CS2R", "S2UR", "R2UR", "ULDC", "UMOV", "UIADD3",
                                             "ULEA", "USHF", "UIMAD", "ULOP3", "UISETP"),
    "branches (BRA, EXIT ...)": ("BRA", "EXIT", "BSSY", "BSYNC", "WARPSYNC", "NOP"),
}

INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)(?:\.[A-Z0-9_.]+)?\s*([^;]*);")
LABEL = re.compile(r"^\s*(\.L_x_\d+):")
TARGET = re.compile(r"`\(([^)]+)\)|\b0x([0-9a-f]+)\b")  # a label (nvdisasm) or an address (cuobjdump)


def disassembler() -> list[str]:
    from tuning.cuda_compile import cuda_home

    for tool, flags in (("cuobjdump", ["-sass"]), ("nvdisasm", ["-c"])):
        path = os.path.join(cuda_home(), "bin", tool)
        path = path if os.path.exists(path) else shutil.which(tool)
        if path:
            return [path, *flags]
    raise RuntimeError("neither cuobjdump nor nvdisasm is in the CUDA toolkit here (the GPU machine has them)")


def parse(sass: str) -> tuple[list[tuple[int, str, str]], dict[str, int]]:
    """(address, opcode, operands) of each instruction, and the address each label stands at
    (cuobjdump prints branch targets as addresses and no labels; nvdisasm prints labels)."""
    instrs, labels, pending = [], {}, []
    for line in sass.splitlines():
        m = LABEL.match(line)
        if m:
            pending.append(m.group(1))
            continue
        m = INSTR.search(line)
        if m:
            addr = int(m.group(1), 16)
            for name in pending:
                labels[name] = addr
            pending = []
            instrs.append((addr, m.group(2), m.group(3)))
    return instrs, labels


def main_loop(instrs, labels, key: str):
    """The backward branch range (target label .. branch) holding the most ``key`` instructions."""
    best = None
    for addr, op, operands in instrs:
        if op != "BRA":
            continue
        t = TARGET.search(operands)
        start = (labels.get(t.group(1)) if t.group(1) else int(t.group(2), 16)) if t else None
        if start is None or start >= addr:
            continue
        body = [i for i in instrs if start <= i[0] <= addr]
        score = sum(1 for i in body if i[1] == key)
        if best is None or score > best[0]:
            best = (score, body)
    return best[1] if best else []


def grouped(instrs) -> dict[str, int]:
    counts = collections.Counter(op for _, op, _ in instrs)
    out = {}
    for group, ops in GROUPS.items():
        out[group] = sum(counts.pop(op, 0) for op in ops)
    out["other"] = sum(counts.values())
    return out


def report(instrs, loop, key) -> str:
    whole, body = grouped(instrs), grouped(loop)
    lines = ["| kind | whole kernel | main loop | share of the loop |", "|---|---:|---:|---:|"]
    for group in whole:
        share = f"{100 * body[group] / len(loop):.1f}%" if loop else ""
        lines.append(f"| {group} | {whole[group]} | {body[group]} | {share} |")
    lines.append(f"| **all** | {len(instrs)} | {len(loop)} | |")
    ops = collections.Counter(op for _, op, _ in loop).most_common(12)
    lines += ["", f"Main loop (backward branch with the most {key}): " + ", ".join(f"{op} {n}" for op, n in ops)]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("schedule")
    ap.add_argument("workload")
    ap.add_argument("--param", action="append", default=[], help="NAME=VALUE config override")
    ap.add_argument("--arch", default=None, help="CUDA arch (default: the GPU's, else sm_90)")
    ap.add_argument("--out", default=None, help="also write kernel.sass and sass_stats.md here")
    args = ap.parse_args(argv)

    from reports.engine import build as B  # heavy (TVM): loaded once the arguments are read

    params = B.parse_params(args.param)
    spec, wl, cfg, built = B.build_named(args.schedule, args.workload, params, args.arch)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        with open(cubin, "wb") as f:
            f.write(built.device.cubin)
        sass = subprocess.run([*disassembler(), cubin], capture_output=True, text=True, check=True).stdout
    instrs, labels = parse(sass)
    ops = {op for _, op, _ in instrs}
    key = next((k for k in ("HGMMA", "HMMA") if k in ops), "FFMA")
    loop = main_loop(instrs, labels, key)
    k = built.kernel
    head = (f"{spec.name} on {wl} ({', '.join(f'{n}={v}' for n, v in params.items()) or 'defaults'}): "
            f"{k.registers} registers, {k.spills} B spilled, {len(instrs)} instructions")
    text = head + "\n\n" + report(instrs, loop, key)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "kernel.sass"), "w") as f:
            f.write(sass)
        with open(os.path.join(args.out, "sass_stats.md"), "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
