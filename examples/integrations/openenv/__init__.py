"""proofgym's OpenEnv package: the server is ``server/app.py``; the environment is proofgym's own."""
