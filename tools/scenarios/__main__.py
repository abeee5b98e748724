"""python -m tools.scenarios --out DIR [--physics | --audit | --negatives | --capabilities | --gnmi] | --demo FILE [--seed N] [--only NAME ...]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.scenarios import DEFAULT_SEED, FAMILIES, generate_corpus, write_demo


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.scenarios", description=__doc__)
    ap.add_argument("--out", type=Path, help="write the scenario corpus into this directory")
    ap.add_argument("--demo", type=Path, help="write the demo recording to this file")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--only", nargs="*", help="only these scenarios")
    ap.add_argument("--physics", action="store_true", help="the corpus built from documented physics (tools/scenarios/physics.py)")
    ap.add_argument("--audit", action="store_true", help="the lossless-configuration audit corpus (tools/scenarios/audit.py)")
    for fam in FAMILIES:
        ap.add_argument(f"--{fam}", dest="family", action="store_const", const=fam, help=f"the {fam} (tools/scenarios/{fam}.py)")
    args = ap.parse_args(argv)
    if not args.out and not args.demo:
        ap.error("give --out DIR and/or --demo FILE")
    if args.out:
        for name, size in generate_corpus(args.out, args.seed, args.only, args.physics, args.audit, args.family).items():
            print(f"{args.out / (name + '.jsonl.gz')}: {size} bytes")
    if args.demo:
        print(f"{args.demo}: {write_demo(args.demo, args.seed)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
