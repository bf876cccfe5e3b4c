"""Messages between controller and ranks on the c10d store, sealed with a per-pool HMAC key.

The key reaches the ranks in their environment, never through the store, so a process that
connects to the store's port without being one of our ranks can read keys but cannot forge a task
or a result: anything it writes fails verification and ends the check as an error.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from typing import Any

TOKEN_ENV = "CC_POOL_KEY"


class Forged(Exception):
    """A message on the store that was not sealed with this pool's key."""


def new_key() -> str:
    return secrets.token_hex(32)


def seal(key: str, obj: Any) -> str:
    body = json.dumps(obj, sort_keys=True)
    mac = hmac.new(key.encode(), body.encode(), hashlib.sha256).hexdigest()
    return json.dumps({"body": body, "mac": mac})


def unseal(key: str, text: str | bytes) -> Any:
    try:
        outer = json.loads(text)
        body, mac = outer["body"], outer["mac"]
        want = hmac.new(key.encode(), body.encode(), hashlib.sha256).hexdigest()
    except (ValueError, KeyError, TypeError, AttributeError):
        raise Forged("malformed message on the store") from None
    if not isinstance(mac, str) or not hmac.compare_digest(mac, want):
        raise Forged("message on the store failed verification (not from one of our ranks)")
    return json.loads(body)


# Store keys of task `seq`. The controller posts the task; each rank posts its result, counts itself
# in `answers` (the rank that completes the count sets `complete`) and, when it failed, in `errors`.
# The controller so polls two keys per round however many ranks there are, and each rank deletes its
# previous result when it reads the next task (by then the controller has read it).
PROGRESS_KEY = "progress"  # where a task's group rank 0 posts how far it is (plain text, shown escaped)


def task_key(seq: int) -> str:
    return f"task/{seq}"


def result_key(seq: int, rank: int) -> str:
    return f"result/{seq}/{rank}"


def answers_key(seq: int) -> str:
    return f"answers/{seq}"


def complete_key(seq: int) -> str:
    return f"complete/{seq}"


def errors_key(seq: int) -> str:
    return f"errors/{seq}"
