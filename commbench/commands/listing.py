"""List what commbench knows: suites, patterns (with their options), model presets, ops.

commbench list            # everything
commbench list models
"""

from __future__ import annotations

import argparse

HELP = "list suites, patterns, model presets and ops"
WHAT = ("suites", "patterns", "models", "ops")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", nargs="?", choices=WHAT, help="one section (default: all)")


def suites() -> list[str]:
    from commbench.traffic.suitefile import load_suite, suite_names

    lines = ["# suites (commbench suite NAME; --quick for the small sweep)"]
    for name in suite_names():
        suite = load_suite(name)
        pats = ",".join(dict.fromkeys(r.pattern for r in suite.runs))
        desc = suite.description.strip().splitlines()[0] if suite.description else ""
        lines.append(f"  {name:<12} {pats:<30} {desc}")
    return lines


def patterns_() -> list[str]:
    from commbench.traffic.patterns import PATTERNS

    lines = ["# patterns (suite files: runs[].pattern, options, sweep)"]
    for spec in PATTERNS.values():
        lines.append(f"  {spec.name:<12} axis {spec.axis or '-':<3} {spec.doc}")
        opts = ", ".join(f"{n}: {t} = {d!r}" for n, t, d in spec.options())
        lines.append(f"  {'':<12} options: {opts}")
    return lines


def models() -> list[str]:
    from commbench.traffic.memory import kv_cache_bytes_per_token
    from commbench.traffic.presets import PRESETS

    lines = [
        "# model presets (params derived from the shape; --model NAME[:key=value,...])",
        f"  {'name':<14} {'layers':>6} {'hidden':>6} {'ffn':>6} {'heads':>5} {'kv':>3} "
        f"{'vocab':>6} {'experts':>7} {'top-k':>5} {'params':>9} {'active':>9} {'KV/token':>9}",
    ]
    for m in PRESETS.values():
        c = m.param_counts()
        lines.append(
            f"  {m.name:<14} {m.layers:>6} {m.hidden:>6} {m.ffn_hidden:>6} {m.heads:>5} "
            f"{m.kv_heads:>3} {m.vocab:>6} {m.experts:>7} {m.top_k:>5} "
            f"{c.total / 1e9:>8.2f}B {c.active / 1e9:>8.2f}B "
            f"{kv_cache_bytes_per_token(m) / 1024:>6.0f}KiB"
        )
    return lines


def ops() -> list[str]:
    from commbench.ops import OPS

    lines = ["# ops (bytes S and bus bandwidth as nccl-tests; p = group size)"]
    for spec in OPS.values():
        lines.append(f"  {spec.name:<14} busbw factor {spec.bus_formula:<9} {spec.doc}")
    return lines


def main(args: argparse.Namespace) -> int:
    from commbench.measure.launch import detect

    sections = {"suites": suites, "patterns": patterns_, "models": models, "ops": ops}
    chosen = [args.what] if args.what else list(WHAT)
    out = []
    for name in chosen:
        out += sections[name]() + [""]
    if detect().rank == 0:
        print("\n".join(out).rstrip())
    return 0
