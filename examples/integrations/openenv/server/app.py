"""OpenEnv server for proofgym: ``uvicorn server.app:app`` or ``python -m server.app --port 8000``.

The suite and the checker come from the environment, read once here where the server starts
(this file is an entry point, not a library): ``PROOFGYM_SUITE`` (default ``coq-tiny``, packaged),
``PROOFGYM_MAX_TURNS`` (default 3), ``PROOFGYM_VERIFIER_URL`` (check on a running
``proofgym serve-verifier`` instead of local workers) and ``PROOFGYM_WORKERS`` (default 2).
"""

from __future__ import annotations

import os

from proofgym.training.integrations.openenv_env import make_app

app = make_app(os.environ.get("PROOFGYM_SUITE", "coq-tiny"),
               max_turns=int(os.environ.get("PROOFGYM_MAX_TURNS", "3")),
               service_url=os.environ.get("PROOFGYM_VERIFIER_URL") or None,
               workers=int(os.environ.get("PROOFGYM_WORKERS", "2")))


def main(host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve until stopped, then stop the provers the app started."""
    import uvicorn

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
