"""What the command modules share: the exit codes (the CLI's contract), the error line, the request-guard flags."""

from __future__ import annotations

import argparse
import sys

EXIT_BAD_INPUT = 2
EXIT_VERIFIER = 3
EXIT_MODEL = 4
EXIT_NOT_OK = 1  # check --strict: a verdict other than OK


def die(code: int, message: str) -> int:
    print(f"proofgym: error: {message}", file=sys.stderr)
    return code


def add_guard_flags(p: argparse.ArgumentParser) -> None:
    """The request-guard flags serve-verifier and serve-model share (see http_guard.py, proofgym.http_guard)."""
    p.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                   help="serve browser requests from this web page origin, e.g. http://localhost:3000 "
                        "(repeatable; default: a request with an Origin header gets 403)")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="accept this name in the Host header besides localhost, loopback addresses, the bound "
                        "address and this machine's host name (repeatable; others get 421)")

