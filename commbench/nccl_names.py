"""NCCL's algorithm and protocol names, one spelling each: the regime an op ran in.

NCCL names them three ways: its kernels and its `NCCL_DEBUG_SUBSYS=TUNING` lines print
ncclAlgoToString / ncclProtoToString (`RING`, `NVLS_TREE`, `LL128`, `SIMPLE`); NCCL_ALGO and
NCCL_PROTO take ncclAlgoStr / ncclProtoStr, case-insensitive (`Ring`, `NVLSTree`, `Simple`);
NCCL 2.20-2.23 print the tuning line's algorithm and protocol as numbers (their index in those
tables). Records and calibrations keep the first spelling (ALGORITHMS, PROTOCOLS); anything else
is refused with a UsageError that lists the names, so an import never files a regime under a
misspelt name.

NCCL_ALGO / NCCL_PROTO are lists (src/graph/tuning.cc parseList): `Ring,Tree` enables both,
`^Tree` all but one, `allreduce:Tree;allgather:Ring` per collective. Only a setting that leaves
one name for the op pins the regime (`forced`); any other lets NCCL choose among several.
"""

from __future__ import annotations

from commbench.errors import UsageError

# index = NCCL's NCCL_ALGO_* / NCCL_PROTO_* number (src/include/device.h, 2.20 on: the tuning
# lines that print numbers); COLLNET is NCCL <= 2.13's one CollNet (its kernels, NCCL_ALGO)
ALGORITHMS = ("TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT")
OLD_ALGORITHMS = ("COLLNET",)
PROTOCOLS = ("LL", "LL128", "SIMPLE")
# NCCL_ALGO's spellings (ncclAlgoStr), compared without case, as above
_SETTING = {
    "tree": "TREE",
    "ring": "RING",
    "collnetdirect": "COLLNET_DIRECT",
    "collnetchain": "COLLNET_CHAIN",
    "nvls": "NVLS",
    "nvlstree": "NVLS_TREE",
    "pat": "PAT",
    "collnet": "COLLNET",
    "ll": "LL",
    "ll128": "LL128",
    "simple": "SIMPLE",
}
# ncclFuncStr (the per-collective prefixes of NCCL_ALGO/NCCL_PROTO, the tuning line's op)
NCCL_FUNCS = {
    "broadcast": "broadcast",
    "reduce": "reduce",
    "allgather": "allgather",
    "reducescatter": "reduce_scatter",
    "allreduce": "allreduce",
    "alltoall": "alltoall",
    "gather": "gather",
    "scatter": "scatter",
    "sendrecv": "sendrecv",
    "send": "sendrecv",
    "recv": "sendrecv",
}
KINDS = {"algorithm": ALGORITHMS + OLD_ALGORITHMS, "protocol": PROTOCOLS}


def canonical(kind: str, name: object, where: str, numeric: bool = False) -> str:
    """`name` (ncclAlgoToString or ncclAlgoStr, any case; NCCL's number where `numeric`: a
    2.20-2.23 tuning line) in ALGORITHMS or PROTOCOLS spelling; anything else is a UsageError
    naming `where` and the names known."""
    names = KINDS[kind]
    text = str(name).strip()
    upper = text.upper()
    if upper in names:
        return upper
    numbers = ALGORITHMS if kind == "algorithm" else PROTOCOLS
    if numeric and text.isascii() and text.isdigit() and int(text) < len(numbers):
        return numbers[int(text)]
    found = _SETTING.get(text.lower().replace("_", ""))
    if found in names:
        return found
    raise UsageError(f"{where}: unknown NCCL {kind} {text!r} (known: {', '.join(names)})")


def label(algorithm: str, protocol: str) -> str:
    """`RING/SIMPLE`, `RING/*` (protocol NCCL's choice), `*/LL`; "" when neither is set."""
    if not algorithm and not protocol:
        return ""
    return f"{algorithm or '*'}/{protocol or '*'}"


def pinned(kind: str, setting: str, op: str, where: str) -> str | None:
    """The one algorithm or protocol an NCCL_ALGO / NCCL_PROTO value leaves `op` (commbench's
    op name), None when it leaves several (a list, an exclusion) or names none for it. A name
    NCCL does not know is a UsageError (NCCL itself refuses such a setting)."""
    value = setting.strip().strip("'\"")
    entries = [e for e in value.split(";") if e.strip()]
    chosen: str | None = None
    for i, entry in enumerate(entries):
        prefix, _, elems = entry.rpartition(":")
        if prefix:
            func = NCCL_FUNCS.get(prefix.strip().lower())
            if func is None:
                raise UsageError(
                    f"{where}: {value!r}: unknown collective {prefix.strip()!r} "
                    f"(known: {', '.join(sorted(NCCL_FUNCS))})"
                )
            if func != op:
                continue
        elif i:
            continue  # NCCL refuses a second entry without a prefix; it sets nothing here
        exclude = elems.strip().startswith("^")
        items = [canonical(kind, e, where) for e in elems.strip().lstrip("^").split(",") if e]
        chosen = items[0] if len(items) == 1 and not exclude else None
    return chosen


# the settings that pin a regime, and the record field each pins
REGIME_SETTINGS = {"algorithm": "NCCL_ALGO", "protocol": "NCCL_PROTO"}


def env_pins(op: str, env: dict, where: dict[str, str]) -> dict[str, str]:
    """{"algorithm": ..., "protocol": ...}: what `env`'s NCCL_ALGO / NCCL_PROTO pin for `op`
    (pinned), only those that leave one name; where[var] names the setting in an error."""
    pins = {}
    for kind, var in REGIME_SETTINGS.items():
        if var in env and (one := pinned(kind, str(env[var]), op, where[var])) is not None:
            pins[kind] = one
    return pins
