"""OpenEnv server for proofgym: ``python -m server.app --port 8000`` (or ``uvicorn server.app:app``).

The suite and the checker come from the environment, read once here where the server starts
(this file is an entry point, not a library): ``PROOFGYM_SUITE`` (default ``coq-tiny``, packaged),
``PROOFGYM_MAX_TURNS`` (default 3), ``PROOFGYM_VERIFIER_URL`` and ``PROOFGYM_VERIFIER_TOKEN`` (check on
a running ``proofgym serve-verifier`` instead of local workers) and ``PROOFGYM_WORKERS`` (default 2).

Every request passes proofgym's request guard first (``proofgym.http_guard``, as ``serve-verifier``):
``PROOFGYM_OPENENV_TOKEN`` is the token clients must send (``http://user:<token>@host:port`` for
OpenEnv's client; required beyond loopback), ``PROOFGYM_ALLOW_HOST`` and ``PROOFGYM_ALLOW_ORIGIN``
(comma-separated) the extra Host names and web page origins it serves.
"""

from __future__ import annotations

import os

from proofgym.http_guard import is_loopback_host
from proofgym.training.integrations.openenv_env import make_app


def _listed(name: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]


TOKEN = os.environ.get("PROOFGYM_OPENENV_TOKEN") or None

app = make_app(os.environ.get("PROOFGYM_SUITE", "coq-tiny"),
               max_turns=int(os.environ.get("PROOFGYM_MAX_TURNS", "3")),
               service_url=os.environ.get("PROOFGYM_VERIFIER_URL") or None,
               service_token=os.environ.get("PROOFGYM_VERIFIER_TOKEN") or None,
               workers=int(os.environ.get("PROOFGYM_WORKERS", "2")),
               token=TOKEN, allowed_hosts=_listed("PROOFGYM_ALLOW_HOST"),
               allowed_origins=_listed("PROOFGYM_ALLOW_ORIGIN"))


def main(host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve until stopped, then stop the provers the app started."""
    import uvicorn

    if not is_loopback_host(host) and not TOKEN:
        raise SystemExit(f"refusing to listen on {host} without a token: anyone who can reach it could run checks; "
                         f"set PROOFGYM_OPENENV_TOKEN (e.g. `openssl rand -hex 24`), or listen on 127.0.0.1")
    try:
        uvicorn.run(app, host=host, port=port)
    finally:
        app.state.proofgym.close()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    main(args.host, args.port)
