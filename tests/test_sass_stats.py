"""The SASS counter finds the main loop by its backward branch and groups what the loop spends its
instructions on (a synthetic listing in cuobjdump's format: no disassembler here)."""

from scripts.sass_stats import grouped, main_loop, parse

LISTING = """
        /*0000*/                   S2R R0, SR_TID.X ;                    /* 0x000000000000 */
        /*0010*/                   IMAD R2, R0, 0x8, RZ ;
.L_x_1:
        /*0020*/                   LDSM.16.M88.4 R8, [R2] ;
        /*0030*/                   HMMA.16816.F32 R4, R8, R12, R4 ;
        /*0040*/                   HMMA.16816.F32 R16, R8, R14, R16 ;
        /*0050*/                   IADD3 R2, R2, 0x20, RZ ;
        /*0060*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0070*/              @!P0 BRA `(.L_x_1) ;
        /*0080*/                   STG.E [R6], R4 ;
.L_x_2:
        /*0090*/                   HMMA.16816.F32 R4, R8, R12, R4 ;
        /*00a0*/               @P1 BRA `(.L_x_2) ;
        /*00b0*/                   EXIT ;
"""


def test_the_main_loop_is_the_backward_branch_with_the_most_mma():
    instrs, labels = parse(LISTING)
    assert len(instrs) == 12 and labels == {".L_x_1": 0x20, ".L_x_2": 0x90}
    loop = main_loop(instrs, labels, "HMMA")
    assert [op for _, op, _ in loop] == ["LDSM", "HMMA", "HMMA", "IADD3", "BAR", "BRA"]
    g = grouped(loop)
    assert g["tensor core (HMMA, HGMMA)"] == 2 and g["shared loads (LDS, LDSM)"] == 1 and g["barriers (BAR)"] == 1
    assert g["integer/address (IMAD, IADD3, VIADD, LEA, SHF, LOP3, ISETP ...)"] == 1
    assert sum(g.values()) == len(loop)  # every instruction counted once


def test_branch_targets_may_be_addresses_as_cuobjdump_prints_them():
    listing = LISTING.replace("`(.L_x_1)", "0x20").replace("`(.L_x_2)", "0x90").replace(".L_x_1:", "")
    instrs, labels = parse(listing)
    loop = main_loop(instrs, labels, "HMMA")
    assert [op for _, op, _ in loop] == ["LDSM", "HMMA", "HMMA", "IADD3", "BAR", "BRA"]
