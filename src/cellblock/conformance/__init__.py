"""The conformance suite: the guarantees every backend must give, checked from inside.

Shipped in the package so that any backend (built-in or third-party) can be checked on
the host it will run on::

    cellblock selfcheck --backend bwrap

or from Python::

    from cellblock.conformance import run_checks
    for outcome in run_checks("docker"):
        print(outcome.name, outcome.passed, outcome.detail)

Each check runs real code in real sandboxes and inspects what came back (and, for
leftover processes, the host's process table). A check passes only on positive evidence:
an expected error code, an absent file, a killed reason; "no error" is never taken as
proof that something was blocked.
"""

from cellblock.conformance.checks import CHECKS, Check, CheckOutcome, run_checks

__all__ = ["CHECKS", "Check", "CheckOutcome", "run_checks"]
