"""``python -m revivify.impl.testing.nemesis``: see the package docstring."""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType

import attrs

from .netns import NetworkError
from .runner import Options, run
from .schedule import PROFILES


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM cleans up like Ctrl-C


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m revivify.impl.testing.nemesis",
                                description="Faults against real processes; exit 0 only if "
                                "nothing was lost, the histories are linearizable and the "
                                "traces clean.")
    p.add_argument("--profile", choices=sorted(PROFILES), default="standard")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--duration", type=float, default=None,
                   help="seconds of workload under faults (default: the profile's)")
    p.add_argument("--workdir", default=None,
                   help="where the servers, histories and summary go (default: a new "
                        "temporary directory, removed after a pass)")
    p.add_argument("--keep", action="store_true", help="keep the directory after a pass")
    p.add_argument("--json-out", default=None, help="also write the summary JSON here")
    p.add_argument("--self-test", choices=["lose-write"], default=None,
                   help="record a phantom acknowledged write: the run must fail")
    p.add_argument("--partitions", choices=["kernel", "rpc"], default="kernel",
                   help="where cuts are made: kernel (every server in a network namespace, "
                        "nftables drops; needs root, ip and nft) or rpc (the fault file: "
                        "the RPC layer drops frames; the fallback where kernel cannot be)")
    args = p.parse_args(argv)
    if args.duration is not None and args.duration <= 0:
        p.error("--duration must be positive")
    profile = PROFILES[args.profile]
    if args.duration is not None:
        profile = attrs.evolve(profile, duration=args.duration)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return run(Options(profile=profile, seed=args.seed, workdir=args.workdir,
                           keep=args.keep, json_out=args.json_out, self_test=args.self_test,
                           partitions=args.partitions))
    except NetworkError as exc:  # before any server started: nothing else to clean
        print(f"nemesis: {exc}; --partitions rpc makes the cuts in the RPC layer instead",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("nemesis: interrupted; every process killed, the fault file and the network "
              "removed",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
