"""Messages between controller and ranks on the c10d store, sealed with a per-pool HMAC key.

The key reaches the ranks in their environment, never through the store, so a process that
connects to the store's port without being one of our ranks can read keys but cannot forge a task
or a result: anything it writes fails verification and ends the check as an error.
"""

from __future__ import annotations

import hmac
import json
import secrets
from typing import Any, Mapping

from clustercheck.units import is_count

TOKEN_ENV = "CC_POOL_KEY"


class Forged(Exception):
    """A message on the store that was not sealed with this pool's key."""


def new_key() -> str:
    return secrets.token_hex(32)


_MAC_LEN = 64  # hex digits of an HMAC-SHA256


def seal(key: str, obj: Any) -> str:
    """The MAC's hex digits, then the JSON body: one parse to open (8,192 results a round at scale)."""
    body = json.dumps(obj, sort_keys=True)
    return hmac.digest(key.encode(), body.encode(), "sha256").hex() + body


def unseal(key: str, text: str | bytes) -> Any:
    raw = text.encode() if isinstance(text, str) else text
    if not isinstance(raw, (bytes, bytearray)) or len(raw) <= _MAC_LEN:
        raise Forged("malformed message on the store")
    mac, body = raw[:_MAC_LEN], raw[_MAC_LEN:]
    if not hmac.compare_digest(mac, hmac.digest(key.encode(), body, "sha256").hex().encode()):
        raise Forged("message on the store failed verification (not from one of our ranks)")
    try:
        return json.loads(body)
    except ValueError:  # sealed by our key yet not JSON: a rank of another version
        raise Forged("malformed message on the store") from None


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


def alive_key(rank: int) -> str:
    """Where a rank's heartbeat stands (worker.py): its counter, sealed with the pool's key and naming the
    rank (beat_of). A forged beat would make a dead rank look alive and move whom a timeout names first;
    a replayed older one reads as a counter gone back, which failure.silent_story takes as no beat."""
    return f"alive/{rank}"


def beat_of(key: str, value: str | bytes, **who: int) -> int | None:
    """The counter of a heartbeat as the store holds it, or None when it is not one: not sealed with `key`,
    or sealed for another sender (`who`, e.g. rank=3: a beat copied from another's key)."""
    try:
        beat = unseal(key, value)
    except Forged:
        return None
    if not isinstance(beat, dict) or any(beat.get(k) != v for k, v in who.items()):
        return None
    count = beat.get("beat")
    return count if is_count(count) else None


def read_present(store: Any, keys: Mapping[int, str]) -> dict[int, Any]:
    """The values of those of `keys` the store holds, never waiting for one that is absent: one round trip
    when it holds them all and has multi_get (torch 2.4 and later), else a check and a get per key."""
    multi_get = getattr(store, "multi_get", None)
    if multi_get is not None and keys and store.check(list(keys.values())):
        return dict(zip(keys, multi_get(list(keys.values()))))
    return {i: store.get(k) for i, k in keys.items() if store.check([k])}


# -- what a rank reads on its stdin after the key (launchers whose ranks do not inherit the pool's environment)


def env_line(env: Mapping[str, str]) -> bytes:
    """The environment as the one stdin line a rank reads after its key (JSON escapes newlines)."""
    return json.dumps(dict(env), sort_keys=True).encode() + b"\n"


def read_env(line: str) -> dict[str, str]:
    """The rank side of `env_line`; {} when the launcher sent no such line. ValueError when malformed."""
    if not line.strip():
        return {}
    data = json.loads(line)
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise ValueError("expected one JSON object of names to string values")
    if any("\0" in k + v or "=" in k or not k for k, v in data.items()):
        raise ValueError("a name or value that no environment can hold")
    return data
