"""The reports' format (record/schema.py REPORT_FORMAT): `clustercheck verify` compares a run's reports with
what its record renders to only when the record was rendered in this format by this version. This test
holds the sha256 of each report rendered from one fixed record (tests/test_reports.py `write_record`),
per format. When the rendering changes, it fails: bump REPORT_FORMAT and put the new digests here, so
that a run rendered by an earlier build of the same version is left uncompared, with a note, instead of
read as edited. junit.xml is left out: junitparser writes it, and a release of junitparser may change
its bytes without any change here."""

from __future__ import annotations

import hashlib
from pathlib import Path

from test_reports import write_record

from clustercheck.record.schema import REPORT_FORMAT
from clustercheck.report import read, render_texts

DIGESTS = {
    2: {"results.json": "817dc5dcd2017ab83fdf501b0543703bd99a5ca2b74a618263047360e8f8989a",
        "sla.json": "9e749b25e9841a6d11e132504614f03804dfe54346d8b300f261cb3b1e93b129",
        "ctrf.json": "aa85d1ba0c1b0a687ac537badeb5147186ca2dec0ea1404242a42365947f6fbb",
        "report.html": "ec0db6ddc975e8ae38f5f83b4685ffa52b39502aa9d699a94b93ec2f30dbe5bb"},
    # 3: an unfinished run and each untested node are a failed test of their own in junit.xml (left out here)
    # and ctrf.json; sla.json states the run's verdict and untested nodes; an untested node makes no PASS
    3: {"results.json": "817dc5dcd2017ab83fdf501b0543703bd99a5ca2b74a618263047360e8f8989a",
        "sla.json": "db6af7545ce4b8f730a1b7ce40019f22719cb2e1e2f22ddfd1e6ad84c3a099d6",
        "ctrf.json": "c13a58238804d3cca33c4e806f89b299c77d61496bfb7d4c25e14b12ec374860",
        "report.html": "ec0db6ddc975e8ae38f5f83b4685ffa52b39502aa9d699a94b93ec2f30dbe5bb"},
    # 4: an item's notes (what its nodes have not got) in every report; ctrf.json's item has `notes` always;
    # a record without a plan says "it stopped before it planned its items" (it said "0 of 0 planned")
    4: {"results.json": "817dc5dcd2017ab83fdf501b0543703bd99a5ca2b74a618263047360e8f8989a",
        "sla.json": "db6af7545ce4b8f730a1b7ce40019f22719cb2e1e2f22ddfd1e6ad84c3a099d6",
        "ctrf.json": "d550132aa832c5480fb999e845b71208004eb45354136ec50ca2ea1f721a34a8",
        "report.html": "3c1321bee014eeb9ecbe9f062a281bea5355ae546142ec59cb469d1eaf4b8386"},
    # 5: `incomplete` has `never_joined` (each absent node -> the items not measured for want of it); an absent
    # node's planned item is "not run: <node> never joined (<why>)" in junit.xml and ctrf.json; report.html
    # names the planned items not run, and each absent node with the items it cost
    5: {"results.json": "f4c253821caaca5dee528077e4b3422d9ffde909b0884696469c1e39f811a653",
        "sla.json": "9a60baf0f5d3e103b0f75ac420cce4a02acc2c398632a3069ef2e281c9d53b85",
        "ctrf.json": "0cefcf6b5083605a50e297d3562378c567198e5b3eb8c076029bebef0781a2bd",
        "report.html": "fe2e41a1262a526801e135412a135777259ba79316d7900a2fd9c28340808655"},
    # 6: results.json has `lost` (each node lost mid-run -> the items it went unmeasured in) where a node was lost
    # (this record lost none: the same bytes); a cluster item measured after a loss names it in a note
    6: {"results.json": "f4c253821caaca5dee528077e4b3422d9ffde909b0884696469c1e39f811a653",
        "sla.json": "9a60baf0f5d3e103b0f75ac420cce4a02acc2c398632a3069ef2e281c9d53b85",
        "ctrf.json": "0cefcf6b5083605a50e297d3562378c567198e5b3eb8c076029bebef0781a2bd",
        "report.html": "fe2e41a1262a526801e135412a135777259ba79316d7900a2fd9c28340808655"},
    # 7: a non-finite number is the string "NaN" / "Infinity" / "-Infinity" in the JSON reports (this record
    # has none: the same bytes)
    7: {"results.json": "f4c253821caaca5dee528077e4b3422d9ffde909b0884696469c1e39f811a653",
        "sla.json": "9a60baf0f5d3e103b0f75ac420cce4a02acc2c398632a3069ef2e281c9d53b85",
        "ctrf.json": "0cefcf6b5083605a50e297d3562378c567198e5b3eb8c076029bebef0781a2bd",
        "report.html": "fe2e41a1262a526801e135412a135777259ba79316d7900a2fd9c28340808655"},    # 8: each sla.json metric names its subject (GPU / pair / node) and report.html's SLA table shows it
    8: {"results.json": "f4c253821caaca5dee528077e4b3422d9ffde909b0884696469c1e39f811a653",
        "sla.json": "d02f0f5231389dbfafd14d59613fee3e193db9ce3afd76f22f38f2101357e7a3",
        "ctrf.json": "0cefcf6b5083605a50e297d3562378c567198e5b3eb8c076029bebef0781a2bd",
        "report.html": "4a95189a00a1dea5bce584022cd744acd0f0300f2992a715d0edad1b0b8cdd05"},
    # 9: a NaN p2p cell, per-GPU bar or sweep size is drawn as "NaN: measured nothing" (this record has none:
    # the same bytes)
    9: {"results.json": "f4c253821caaca5dee528077e4b3422d9ffde909b0884696469c1e39f811a653",
        "sla.json": "d02f0f5231389dbfafd14d59613fee3e193db9ce3afd76f22f38f2101357e7a3",
        "ctrf.json": "0cefcf6b5083605a50e297d3562378c567198e5b3eb8c076029bebef0781a2bd",
        "report.html": "4a95189a00a1dea5bce584022cd744acd0f0300f2992a715d0edad1b0b8cdd05"},
    # 10: a --repeat N run that stopped counts the repetitions it never started, each item of each as not run
    # (this record did not repeat: the same bytes)
    10: {"results.json": "f4c253821caaca5dee528077e4b3422d9ffde909b0884696469c1e39f811a653",
         "sla.json": "d02f0f5231389dbfafd14d59613fee3e193db9ce3afd76f22f38f2101357e7a3",
         "ctrf.json": "0cefcf6b5083605a50e297d3562378c567198e5b3eb8c076029bebef0781a2bd",
         "report.html": "4a95189a00a1dea5bce584022cd744acd0f0300f2992a715d0edad1b0b8cdd05"},
    # 11: report.html breaks a long token in a cell; its Checks table shows a message's first line, cut, with a link
    11: {"results.json": "f4c253821caaca5dee528077e4b3422d9ffde909b0884696469c1e39f811a653",
         "sla.json": "d02f0f5231389dbfafd14d59613fee3e193db9ce3afd76f22f38f2101357e7a3",
         "ctrf.json": "0cefcf6b5083605a50e297d3562378c567198e5b3eb8c076029bebef0781a2bd",
         "report.html": "97e2d413073877346c348a4ceee1b2f6e41b2db49cacee2e709769c47138bd38"},
    # 12: a `run --compare` whose baseline is no reference for a pass is an ERROR at best (INCOMPLETE with an
    # unfinished baseline), with `compare` in results.json and a failed `compare` test in junit.xml and ctrf.json
    # (this record compared nothing: the same bytes)
    12: {"results.json": "f4c253821caaca5dee528077e4b3422d9ffde909b0884696469c1e39f811a653",
         "sla.json": "d02f0f5231389dbfafd14d59613fee3e193db9ce3afd76f22f38f2101357e7a3",
         "ctrf.json": "0cefcf6b5083605a50e297d3562378c567198e5b3eb8c076029bebef0781a2bd",
         "report.html": "97e2d413073877346c348a4ceee1b2f6e41b2db49cacee2e709769c47138bd38"},
    # 13: report.html's network section names every node of the run, one without network facts saying why
    13: {"results.json": "f4c253821caaca5dee528077e4b3422d9ffde909b0884696469c1e39f811a653",
         "sla.json": "d02f0f5231389dbfafd14d59613fee3e193db9ce3afd76f22f38f2101357e7a3",
         "ctrf.json": "0cefcf6b5083605a50e297d3562378c567198e5b3eb8c076029bebef0781a2bd",
         "report.html": "7feed9f64fe00b190fb6c93d93bb846dd96bb7ecd7e29ca75cbd7381b78686a7"},
}


def test_the_reports_render_as_their_format_says(tmp_path: Path) -> None:
    texts = render_texts(read(write_record(tmp_path / "run.jsonl")), "SHA256:test")
    got = {name: hashlib.sha256(data).hexdigest() for name, data in texts.values() if name != "junit.xml"}
    assert REPORT_FORMAT in DIGESTS, f"REPORT_FORMAT {REPORT_FORMAT} has no digests here: {got}"
    assert got == DIGESTS[REPORT_FORMAT], (
        "the reports render differently from the same record: bump REPORT_FORMAT in record/schema.py and "
        f"add its digests here: {got}")


def test_the_digests_do_not_depend_on_where_the_record_is(tmp_path: Path) -> None:
    a = render_texts(read(write_record(tmp_path / "a.jsonl")), None)
    (tmp_path / "deeper").mkdir()
    b = render_texts(read(write_record(tmp_path / "deeper" / "b.jsonl")), None)
    assert a == b
