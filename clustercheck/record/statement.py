"""What a signed run attests to: its evidence files (every file of the run directory but the attestation
itself: the record, the reports, the inputs as run, the rank and NCCL logs, the exclusion list) with their
sha256, and the in-toto Statement about them. The predicate is in-toto's test-result v0.1
(https://github.com/in-toto/attestation spec/predicates/test-result.md: result PASSED/WARNED/FAILED,
configuration, passed/warned/failed tests) plus a `clustercheck` block: the run, its platform, each node's
hardware identity, and the versions that measured."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any, Mapping, Sequence

from clustercheck.record.io import Record
from clustercheck.record.schema import counts, item_id

ATTESTATION = "attestation.json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
# What `clustercheck verify` checks, said the same way in sla.json, the HTML report and docs/evidence.md.
VERIFY_CHECKS = (
    "the signature, against exactly the public key(s) given (no patterns, no trust on first use)",
    "the sha256 of every file the attestation lists",
    "that no file of the run directory is missing from the attestation",
    "that every metric follows from the raw per-rank measurements in run.jsonl, by the formulas the run used",
    "that every verdict follows from its metric and the limit in the recorded threshold profile",
)
# in-toto's result of a run, from clustercheck's verdict: anything not cleared is not PASSED
RESULT = {"PASS": "PASSED", "SKIPPED": "WARNED", "FAIL": "FAILED", "ERROR": "FAILED", "INCOMPLETE": "FAILED"}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class EvidenceProblem(ValueError):
    """A run directory holds something that cannot be evidence (a link, a device): the message names it."""


def unreadable(name: str, exc: OSError) -> str:
    return f"{name}: cannot be read ({exc.strerror or type(exc).__name__})"


def evidence_files(run_dir: Path) -> list[str]:
    """Every file under the run directory, as POSIX paths relative to it, sorted, without the attestation.
    A symbolic link or anything else that is not a regular file is refused: what it points at is not part
    of the run directory a buyer receives. So is a file or directory that cannot be read: a directory
    walked past unread could hide a file added after signing."""

    def rel(path: str) -> str:
        return Path(path).relative_to(run_dir).as_posix()

    def refuse(exc: OSError) -> None:
        raise EvidenceProblem(unreadable(rel(str(exc.filename)), exc))

    out = []
    for top, dirs, files in os.walk(run_dir, onerror=refuse):
        for name in dirs + files:
            path = os.path.join(top, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError as exc:
                raise EvidenceProblem(unreadable(rel(path), exc)) from None
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise EvidenceProblem(f"{rel(path)}: not a regular file (a link or a device); a run directory holds "
                                      f"files only")
            if stat.S_ISREG(mode) and rel(path) != ATTESTATION:
                out.append(rel(path))
    return sorted(out)


def subjects(run_dir: Path) -> list[dict[str, Any]]:
    out = []
    for name in evidence_files(run_dir):
        try:
            out.append({"name": name, "digest": {"sha256": sha256_file(run_dir / name)}})
        except OSError as exc:
            raise EvidenceProblem(unreadable(name, exc)) from None
    return out


def header_problem(header: Mapping[str, Any]) -> str | None:
    """Why the run line cannot make a statement, naming its key (`run.facts.gpus: text, not a list of
    objects`); None when it can. The record's reader (record/lines.py) checks what every reader indexes; these
    are what only the statement reads: each node's facts (`facts`, `node_facts`), which a run writes as
    objects, its GPUs a list of objects."""

    def facts_problem(where: str, facts: Any) -> str | None:
        if not isinstance(facts, Mapping):
            return f"{where}: {_json_type(facts)}, not an object"
        for key in ("identity", "versions"):
            if facts.get(key) is not None and not isinstance(facts[key], Mapping):
                return f"{where}.{key}: {_json_type(facts[key])}, not an object"
        gpus = facts.get("gpus")
        if gpus is not None and not isinstance(gpus, list):
            return f"{where}.gpus: {_json_type(gpus)}, not a list of objects"
        for i, gpu in enumerate(gpus or ()):
            if not isinstance(gpu, Mapping):
                return f"{where}.gpus[{i}]: {_json_type(gpu)}, not an object"
        return None

    if header.get("facts") is not None and (why := facts_problem("run.facts", header["facts"])):
        return why
    node_facts = header.get("node_facts")
    if node_facts is None:
        return None
    if not isinstance(node_facts, Mapping):
        return f"run.node_facts: {_json_type(node_facts)}, not an object"
    for node, facts in node_facts.items():
        if why := facts_problem(f"run.node_facts.{str(node)[:40]}", facts):
            return why
    return None


def _json_type(value: Any) -> str:
    """What a JSON value is, in JSON's words (a reader of the record never sees Python's)."""
    for types, name in ((type(None), "null"), (bool, "a boolean"), ((int, float), "a number"), (str, "text"),
                        (list, "a list"), (Mapping, "an object")):
        if isinstance(value, types):
            return name
    return type(value).__name__


def _node_identity(name: str, facts: Mapping[str, Any], pool_ranks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    ident = dict(facts.get("identity") or {})
    gpus = ident.pop("gpus", None)
    if not gpus:  # a record from before identities were read: the bus ids and names NVML gave
        gpus = [{k: g.get(k) for k in ("index", "bus_id", "name")} for g in facts.get("gpus") or ()]
    ranks = [r for r in pool_ranks if r.get("host") == name]
    return {"node": name, "hostname": ident.pop("hostname", facts.get("host")), "gpus": gpus,
            "board": ident.pop("board", {}), "nics": ident.pop("nics", []),
            "kernel": ident.pop("kernel", None) or facts.get("os"), **ident,
            "versions": {"driver": facts.get("driver"), "cuda_driver": facts.get("cuda_driver"),
                         "cuda": _one(r.get("cuda") for r in ranks), "nccl": _one(r.get("nccl") for r in ranks),
                         **(facts.get("versions") or {})}}


def _one(values: Any) -> str | None:
    found = sorted({str(v) for v in values if v})
    return ", ".join(found) or None


def predicate(rec: Record, status: Mapping[str, Any]) -> dict[str, Any]:
    """in-toto test-result fields plus clustercheck's own block (run, platform, nodes, versions)."""
    header = rec.header
    pools = [r["pool"] for r in rec.results if r.get("pool")]
    passed: list[str] = []
    warned: list[str] = []
    failed: list[str] = []
    for r in rec.results:
        name = item_id(r) + (f"#{r['repeat']}" if r.get("repeat") else "")
        {"passed": passed, "skipped": warned}.get(r["outcome"], failed).append(name)
    failed += [f"{item_id(p)} (not run)" for p in rec.not_run()]
    refs: list[tuple[str, Mapping[str, Any]]] = [("thresholds", header.get("thresholds") or {})]
    refs += [("suite", s) for s in header.get("suites") or []]
    configuration = [{"name": ref.get("file"), "digest": {"sha256": ref.get("sha256")}, "annotations": {"role": role}}
                     for role, ref in refs if ref]
    nodes = header.get("nodes") or []
    node_facts = header.get("node_facts") or {n: header.get("facts") or {} for n in nodes[:1]}
    ranks = [r for pool in pools for r in pool.get("ranks") or ()]
    return {
        "result": RESULT.get(status["verdict"], "FAILED"),
        "configuration": configuration,
        "passedTests": passed, "warnedTests": warned, "failedTests": failed,
        "clustercheck": {
            "run": {"id": header.get("run_id") or header.get("started"), "started": header.get("started"),
                    "finished": (rec.end or {}).get("finished"), "verdict": status["verdict"],
                    "incomplete": status.get("incomplete"),
                    # as the run writes them at its end (run/session.py), from its results: never the end line's
                    "counts": counts(rec.results) if rec.end is not None else None,
                    "argv": header.get("argv")},
            "platform": header.get("platform"), "platform_detected": header.get("platform_detected"),
            "launcher": header.get("launcher"), "backend": header.get("backend"), "ranks": header.get("ranks"),
            "nodes": [_node_identity(n, node_facts.get(n) or {}, ranks) for n in nodes],
            "versions": versions(header, rec.results),
            "verify": list(VERIFY_CHECKS),
        },
    }


def versions(header: Mapping[str, Any], results: Sequence[Mapping[str, Any]]) -> dict[str, str | None]:
    """The software that measured, run-wide, as the statement names it (and `clustercheck compare` when
    two runs differ in it): clustercheck, torch, the driver and kernel of the run's facts, and CUDA and
    NCCL as the ranks loaded them (several values joined; NCCL as the library answered: fabric/nccl_lib.py)."""
    facts = header.get("facts") or {}
    ranks = [r for res in results if res.get("pool") for r in res["pool"].get("ranks") or ()]
    return {"clustercheck": (facts.get("versions") or {}).get("clustercheck"),
            "torch": (facts.get("versions") or {}).get("torch"), "driver": facts.get("driver"),
            "cuda": _one(r.get("cuda") for r in ranks), "nccl": _one(r.get("nccl") for r in ranks),
            "kernel": (facts.get("identity") or {}).get("kernel") or facts.get("os")}


def statement(run_dir: Path, rec: Record, status: Mapping[str, Any]) -> dict[str, Any]:
    return {"_type": STATEMENT_TYPE, "subject": subjects(run_dir), "predicateType": PREDICATE_TYPE,
            "predicate": predicate(rec, status)}
