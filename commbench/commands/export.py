"""Export a calibration to a simulator's network description.

    commbench export astra-sim calibration.json -o network.yml
    commbench export calculon calibration.json --base a100_80g.json -o system.json

One dimension (ASTRA-sim) or tier (Calculon) per link class, from the link table's best
algorithm model. What a single alpha-beta line per link cannot carry (per-size segments,
per-group-size alphas, per-op fits) is listed in the output.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "export a calibration as ASTRA-sim network.yml or Calculon network tiers"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("format", choices=("astra-sim", "calculon"), help="target simulator")
    p.add_argument("calibration", metavar="CAL", help="calibration JSON from commbench fit")
    p.add_argument("-o", "--output", default=None, help="output file (default: stdout)")
    p.add_argument("--backend", default=None, help="which backend's link table to export")
    p.add_argument("--timing", default=None, help="which timing mode's link table to export")
    p.add_argument(
        "--npus",
        default=None,
        help="NPUs per dimension, e.g. intra=8,inter=4 (default: largest measured group / hosts)",
    )
    p.add_argument(
        "--topology",
        default=None,
        help="astra-sim: topology per dimension, e.g. intra=Switch,inter=Switch "
        "(default: from the best model: ring=Ring, pairwise=FullyConnected, tree=Switch)",
    )
    p.add_argument("--base", type=Path, default=None, help="calculon: system JSON to fill in")


def _positive(text: str) -> int:
    value = int(text)
    if value < 2:
        raise ValueError(text)
    return value


def _only_exported(flag: str, given: dict, chosen) -> None:
    """A per-link flag naming a link class the export does not have is a typo, not a no-op."""
    from commbench.errors import UsageError

    exported = [t.link_class for t in chosen]
    unknown = sorted(set(given) - set(exported))
    if unknown:
        raise UsageError(
            f"{flag} {unknown[0]}: not a link class of the exported link table "
            f"(it has {', '.join(exported)})"
        )


def main(args: argparse.Namespace) -> int:
    from commbench.calibration import load
    from commbench.errors import UsageError
    from commbench.formats import astra_sim, calculon
    from commbench.formats.exportbase import parse_assignments, tiers

    cal = load(args.calibration)
    npus = parse_assignments(args.npus, "--npus", _positive)
    chosen = tiers(cal, args.backend, args.timing, npus)
    _only_exported("--npus", npus, chosen)
    if args.format == "astra-sim":
        if args.base is not None:
            raise UsageError("--base is for calculon")
        topo = parse_assignments(args.topology, "--topology")
        _only_exported("--topology", topo, chosen)
        bad = [v for v in topo.values() if v not in astra_sim.TOPOLOGIES]
        if bad:
            raise UsageError(
                f"--topology {bad[0]!r}: choose from {', '.join(astra_sim.TOPOLOGIES)}"
            )
        text, notes = astra_sim.export(cal, chosen, topo)
    else:
        if args.topology:
            raise UsageError("--topology is for astra-sim")
        text, notes = calculon.export(cal, chosen, args.base)
    if args.output:
        out = Path(args.output)
        try:
            out.write_text(text)
        except OSError as e:
            raise UsageError(f"cannot write {out}: {e.strerror or e}") from None
        for n in notes:
            print(f"# not expressed: {n}")
        print(f"wrote {out} ({args.format}, {len(chosen)} dimension(s))")
    else:
        sys.stdout.write(text)
        for n in notes:
            print(f"# not expressed: {n}", file=sys.stderr)
    return 0
