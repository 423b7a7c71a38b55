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


HOPPER = """
        /*0000*/                   USETMAXREG.DEALLOC.CTAPOOL.U32 0x28 ;
        /*0010*/                   UTMAPF.L2.2D [UR4] ;
.L_x_3:
        /*0020*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR8+0x30], R3 ;
        /*0030*/                   SYNCS.ARRIVE.TRANS64.RED.A1T0 RZ, [UR8], RZ ;
        /*0040*/                   UTMALDG.2D [UR16], [UR4] ;
        /*0050*/                   UTMALDG.2D.MULTICAST [UR24], [UR6], UR10 ;
        /*0060*/              @!P1 BRA `(.L_x_3) ;
.L_x_4:
        /*0070*/                   WARPGROUP.ARRIVE ;
        /*0080*/                   HGMMA.64x256x16.F32 R24, gdesc[UR12], R24 ;
        /*0090*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*00a0*/                   UCGABAR_ARV ;
        /*00b0*/               @P2 BRA `(.L_x_4) ;
"""


def test_the_hopper_pieces_have_their_own_rows():
    instrs, labels = parse(HOPPER)
    g = grouped(instrs)
    assert g["TMA bulk tensor copies (UTMALDG, UTMASTG, UTMAPF, UBLKCP)"] == 3
    assert g["mbarriers (SYNCS: init, arrive, expect-tx, try-wait)"] == 2
    assert g["register reallocation (USETMAXREG)"] == 1 and g["cluster barriers (UCGABAR)"] == 1
    assert g["other"] == 0
    loop = main_loop(instrs, labels, "HGMMA")
    assert [op for _, op, _ in loop] == ["WARPGROUP", "HGMMA", "WARPGROUP", "UCGABAR_ARV", "BRA"]
