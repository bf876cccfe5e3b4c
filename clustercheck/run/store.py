"""A client of torch.distributed's TCPStore in plain Python, so that a controller need not import torch.

A local pool's store is served by torch's own TCPStore (its C++ server, which every rank's client
speaks to), in a process the zygote forks for it (run/zygote_serve.py), while the controller talks to it
through this client. The controller then never imports torch: that import was 2.5-3.2 CPU-s of every
local run on a 2-vCPU VM, paid beside the ranks' own imports (docs/benchmarks.md).

The wire format is TCPStore's (torch/csrc/distributed/c10d/TCPStoreBackend.hpp and
TCPStoreLibUvBackend.cpp in github.com/pytorch/pytorch): a query is one type byte and its arguments,
integers in the host's byte order, a key or value as a 64-bit length and its bytes. The client sends
VALIDATE (a magic number, no reply) once, then only the queries the controller uses: SET, GET, ADD,
CHECK, WAIT, GETNUMKEYS, DELETE_KEY, MULTI_GET and CANCEL_WAIT (PING and the queue queries are newer;
this client never sends them). tests/test_store_client.py runs each against the installed torch's server;
on 2026-11-27 the same queries were also run against torch 2.3.1's (the oldest pyproject allows) and a
whole local run passed on it (docs/benchmarks.md).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Callable, Sequence, TypeVar

from clustercheck.errors import HarnessError

VALIDATE, SET, GET, ADD, CHECK, WAIT, GETNUMKEYS, DELETE_KEY, MULTI_GET, CANCEL_WAIT = 0, 1, 3, 4, 5, 6, 7, 8, 10, 12
MAGIC = 0x3C85F7CE
READY = 0  # CheckResponseType
STOP_WAITING, WAIT_CANCELED = 0, 1  # WaitResponseType
_U64, _I64, _U32 = struct.Struct("=Q"), struct.Struct("=q"), struct.Struct("=I")
T = TypeVar("T")


class StoreLost(HarnessError):
    """The store's connection failed or its server ended: whatever the pool was doing cannot finish."""


class StoreSilent(StoreLost):
    """The server did not answer a query within the client's timeout (the connection is closed)."""


class StoreTimeout(HarnessError):
    """A key was not set within the store's timeout."""


def _blob(data: bytes) -> bytes:
    return _U64.pack(len(data)) + data


def _key(key: str) -> bytes:
    return _blob(b"/" + key.encode())  # torch's client puts "/" before every key (TCPStore.cpp, keyPrefix_)


class StoreClient:
    """One connection to a TCPStore server, safe to share between threads (one query at a time), with
    the subset of `torch.distributed.Store` the controller uses: set, get, add, check, delete_key,
    multi_get, num_keys. `what` names the store in errors."""

    def __init__(self, host: str, port: int, timeout: float, what: str = "the store") -> None:
        self.host, self.port = host, port  # as torch's TCPStore names them
        self.timeout = timeout
        self.what = what
        self._lock = threading.Lock()
        self._buf, self._pos = bytearray(), 0  # answers received, and how far they were read
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock.sendall(bytes([VALIDATE]) + _U32.pack(MAGIC))
        except OSError as exc:
            raise StoreLost(f"{what} at {host}:{port} cannot be reached: {exc}") from None
        try:
            self.num_keys()  # the first answer: the server reads and answers queries
        except StoreLost:
            self._sock.close()
            raise

    # -- the Store interface ---------------------------------------------------------------------------
    def set(self, key: str, value: str | bytes) -> None:
        data = value.encode() if isinstance(value, str) else bytes(value)
        self._tell(bytes([SET]) + _key(key) + _blob(data))

    def get(self, key: str) -> bytes:
        """The key's value, once set (waiting up to the timeout, as torch's get does: StoreTimeout)."""
        self.wait([key])
        return self._ask(bytes([GET]) + _key(key), self._blob)

    def add(self, key: str, amount: int) -> int:
        return self._ask(bytes([ADD]) + _key(key) + _I64.pack(amount), lambda: _I64.unpack(self._exact(8))[0])

    def check(self, keys: Sequence[str]) -> bool:
        """Whether every one of `keys` is set, without waiting."""
        if not keys:  # never sent: torch's server logs the first key of every CHECK
            return True
        query = bytes([CHECK]) + _U64.pack(len(keys)) + b"".join(_key(k) for k in keys)
        return self._ask(query, lambda: self._exact(1)[0] == READY)

    def delete_key(self, key: str) -> bool:
        return self._ask(bytes([DELETE_KEY]) + _key(key), lambda: _I64.unpack(self._exact(8))[0] > 0)

    def multi_get(self, keys: Sequence[str]) -> list[bytes]:
        """The values of `keys`, in one round trip. Every key must be set: torch's libuv server (2.4 and
        later) reads one that is not as empty, and 2.3's drops the connection. The pool asks only once
        the count of answers is complete, which the last rank sets after its own result."""
        if not keys:
            return []
        query = bytes([MULTI_GET]) + _U64.pack(len(keys)) + b"".join(_key(k) for k in keys)
        return self._ask(query, lambda: [self._blob() for _ in keys])

    def num_keys(self) -> int:
        return self._ask(bytes([GETNUMKEYS]), lambda: _I64.unpack(self._exact(8))[0])

    def wait(self, keys: Sequence[str], timeout: float | None = None) -> None:
        """Return once every one of `keys` is set; StoreTimeout after `timeout` (the store's by default),
        when the server is told to stop waiting, as torch's client does, so the connection stays usable."""
        if not keys:
            return
        limit = self.timeout if timeout is None else timeout
        query = bytes([WAIT]) + _U64.pack(len(keys)) + b"".join(_key(k) for k in keys)
        with self._lock:
            self._send(query)
            self._sock.settimeout(limit)
            try:
                if self._exact(1)[0] == STOP_WAITING:
                    return
            except TimeoutError:
                pass
            finally:
                self._sock.settimeout(self.timeout)
            self._send(bytes([CANCEL_WAIT]))
            self._answer(self._canceled)
        raise StoreTimeout(f"{self.what}: {', '.join(keys)} not set within {limit:g} s")

    def set_timeout(self, seconds: float) -> None:
        """How long a query waits for its answer (and `get` for its key) from now on."""
        self.timeout = seconds
        self._sock.settimeout(seconds)

    def close(self) -> None:
        self._sock.close()

    # -- the wire ----------------------------------------------------------------------------------
    def _tell(self, query: bytes) -> None:
        with self._lock:
            self._send(query)

    def _ask(self, query: bytes, answer: Callable[[], T]) -> T:
        with self._lock:
            self._send(query)
            return self._answer(answer)

    def _answer(self, answer: Callable[[], T]) -> T:
        try:
            return answer()
        except TimeoutError:  # half an answer may follow: the connection is of no more use
            self._sock.close()
            raise StoreSilent(f"{self.what}: no answer within {self.timeout:g} s") from None

    def _canceled(self) -> None:
        while self._exact(1)[0] != WAIT_CANCELED:  # a STOP_WAITING sent as we gave up comes first
            pass

    def _send(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except OSError as exc:
            raise StoreLost(f"{self.what}: the connection failed ({exc})") from None

    def _blob(self) -> bytes:
        return self._exact(_U64.unpack(self._exact(8))[0])

    def _exact(self, n: int) -> bytes:
        """The next `n` bytes of the answers, read 64 KiB at a time (a MULTI_GET of a pool's results is
        thousands of small values); the consumed head is dropped only before the next read, so the work
        stays linear in the bytes."""
        while len(self._buf) - self._pos < n:
            del self._buf[:self._pos]
            self._pos = 0
            try:
                chunk = self._sock.recv(max(1 << 16, n - len(self._buf)))
            except TimeoutError:  # the caller's to judge (`wait` expects it); what arrived stays buffered
                raise
            except OSError as exc:
                raise StoreLost(f"{self.what}: the connection failed ({exc})") from None
            if not chunk:
                raise StoreLost(f"{self.what}: its server closed the connection (it ended)")
            self._buf += chunk
        self._pos += n
        return bytes(self._buf[self._pos - n:self._pos])


def served(host: str, port: int, timeout: float, what: str, wanted: Callable[[], bool]) -> StoreClient:
    """A client once the server answers (its process may still be on its way: connections wait in the
    listening socket's backlog), asking again each second while `wanted()`, so that a caller that gave up
    meanwhile is not kept waiting; StoreSilent after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            client = StoreClient(host, port, 1.0, what)
            client.set_timeout(timeout)
            return client
        except StoreSilent:
            if not wanted():
                raise StoreLost(f"{what}: no answer, and nothing waits for it any more") from None
            if time.monotonic() >= deadline:
                raise StoreSilent(f"{what}: no answer within {timeout:g} s") from None
