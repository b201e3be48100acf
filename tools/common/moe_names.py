"""How `xstage moe bench` names its implementations, read back: the schedule a result ran (the one parser the MoE
tools share). The names carry the parameters (`megamoe-expert-wave W=8 lag=1 128x256`, `megamoe-auto: interleaved
D=9 128x256 pairs`), so a schedule is recognised by its words: a lag makes expert waves pipelined, and `auto` results
are read as the schedule they chose.
"""


def schedule_of(impl: str) -> str:
    """-> "unfused", "pipelined", "wave" or "interleaved"."""
    if impl.startswith("unfused"):
        return "unfused"
    if "lag=" in impl:
        return "pipelined"
    return "wave" if "expert-wave" in impl else "interleaved"


def family_of(impl: str) -> str:
    """`auto` for the layer's own choice (whatever it chose), else schedule_of: how results compare implementations
    as a user picks them."""
    return "auto" if impl.startswith("megamoe-auto") else schedule_of(impl)
