"""Runs the named test modules like `python3 -m unittest -v`, but exits as the C tests'
harness does: 1 when anything failed, 77 when a case was skipped (CTest's SKIP_RETURN_CODE:
the test is reported skipped, not passed, and the reasons are in the output), else 0."""

from __future__ import annotations

import sys
import unittest


def main(names: list[str]) -> int:
    suite = unittest.defaultTestLoader.loadTestsFromNames(names)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    if not result.wasSuccessful():
        return 1
    if result.skipped:
        print(f"skip: {len(result.skipped)} case(s) skipped (reasons above): the test is "
              "reported skipped, not passed", file=sys.stderr)
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
