"""The project's defs folder: one `MemWalTableComponent` per table (`dg scaffold defs ...`)."""
