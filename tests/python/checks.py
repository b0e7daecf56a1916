"""The scripts' shared runner: every check runs even if an earlier one failed, each is reported
as `ok` or `FAIL` with its traceback, and the exit status is non-zero if any failed."""

import sys
import traceback


def run(checks, *args):
    failed = 0
    for check in checks:
        try:
            check(*args)
        except Exception:  # noqa: BLE001 - every failure, decoding errors included, is reported
            failed += 1
            print(f"FAIL {check.__name__}")
            traceback.print_exc(file=sys.stdout)
        else:
            print(f"ok   {check.__name__}")
    print(f"{len(checks) - failed} passed, {failed} failed")
    return 1 if failed else 0
