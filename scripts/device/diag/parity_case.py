"""One FSDP2 parity run, for diagnosis: the cases and world of tests/python/test_fsdp_parity.py's
run_parity, printed per case (its failures in full, the TIDE report's slots and deferrals).

  python3 scripts/device/diag/parity_case.py --device cuda-shared --world 2 --mode in-place --cases i
"""

import argparse
import json
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests" / "python"))
import test_fsdp_parity  # noqa: E402


class _Dirs:
    def mktemp(self, name):
        return pathlib.Path(tempfile.mkdtemp(prefix=name))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--mode", default="in-place")
    ap.add_argument("--cases", default="i")
    args = ap.parse_args()
    try:
        run = test_fsdp_parity.run_parity(args.world, _Dirs(), device=args.device, cases=args.cases, mode=args.mode)
    except BaseException as failed:  # noqa: BLE001 - pytest.fail is a BaseException
        print("RUN FAILED:", failed)
        return 1
    ok = True
    for case, result in sorted(run["cases"].items()):
        failures = result.get("failures", [])
        ok = ok and not failures
        print(f"case {case}: {'passed' if not failures else f'{len(failures)} failures'}")
        for line in failures[:40]:
            print("   ", line)
        for row in result.get("report", []):
            keys = ("group", "backend", "slot", "deferred_prefetches", "all_gathers", "stock_calls", "reason")
            print("    report", json.dumps({k: row.get(k) for k in keys}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
