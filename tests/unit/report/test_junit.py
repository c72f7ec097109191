"""junit.xml of the demo run: valid against the Jenkins JUnit schema (tests/data/junit/jenkins-junit.xsd),
one testsuite per check family with nccl split into pairs and blocks, one testcase per verdict with its
message / reason / numbers; the large-run writer writes the same document; pytest's own --junitxml still
works beside it."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from lxml import etree

from clusteraccept.families import JUNIT_SUITES
from clusteraccept.report import junit
from clusteraccept.report.model import digest

from .conftest import REPO, DemoRun

XSD = REPO / "tests" / "data" / "junit" / "jenkins-junit.xsd"


def validate(text: bytes) -> list[str]:
    schema = etree.XMLSchema(etree.parse(str(XSD)))
    ok = schema.validate(etree.fromstring(text))
    return [] if ok else [f"{e.line}: {e.message}" for e in schema.error_log][:10]


def cases(root: ET.Element) -> dict[str, tuple[str, ET.Element]]:
    return {tc.get("name", ""): (ts.get("name", ""), tc) for ts in root for tc in ts.iter("testcase")}


def test_demo_junit_validates_against_the_jenkins_schema(demo_run: DemoRun) -> None:
    assert validate((demo_run.run / "junit.xml").read_bytes()) == []


def test_one_suite_per_family_one_case_per_verdict(demo_run: DemoRun) -> None:
    root = ET.parse(demo_run.run / "junit.xml").getroot()
    results = demo_run.results
    assert [ts.get("name") for ts in root] == list(JUNIT_SUITES)
    assert int(root.get("tests", 0)) == len(results["verdicts"])
    by = cases(root)
    assert len(by) == len(results["verdicts"])  # test ids are unique
    for ts in root:
        tcs = list(ts.iter("testcase"))
        assert int(ts.get("tests", 0)) == len(tcs)
        assert int(ts.get("failures", 0)) == sum(1 for tc in tcs if tc.find("failure") is not None)
        assert int(ts.get("skipped", 0)) == sum(1 for tc in tcs if tc.find("skipped") is not None)
        props = {p.get("name"): p.get("value") for p in ts.iter("property")}
        assert props["site"] == "demo" and props["verdict"] == "REJECT" and props["simulated"] == "True"
        assert (
            props["run_id"] == results["run_id"] and props["baselines_sha256"] == results["baselines_sha256"]
        )
        assert props["signoff"] == "Ada Lovelace / acceptance engineer / " + results["signoff"]["date"]

    suite, tc = by["nccl.busbw[node3-node4:rail5:sendrecv:1GiB]"]
    verdict = next(v for v in results["verdicts"] if v["subject"] == "node3-node4:rail5:sendrecv:1GiB")
    assert suite == "nccl-pairs" and tc.get("classname") == "clusteraccept.nccl-pairs"
    failure = tc.find("failure")
    assert failure is not None and failure.get("message") == verdict["message"]
    assert failure.get("message", "").startswith("busbw_GBps=25.")
    out = (tc.findtext("system-out") or "").splitlines()
    assert out[:4] == [
        f"measured={verdict['value']:.6g}",
        "ref=46",
        f"bounds=[{verdict['lower']:.6g}, inf]",
        "unit=GB/s",
    ]
    assert "key=nccl.busbw.sendrecv.pair_in_block.rail5.1GiB" in out
    assert f"evidence={verdict['evidence'][0]}" in out and (demo_run.run / verdict["evidence"][0]).exists()

    assert by["nccl.launch[node1-node2:rail0:sendrecv]"][0] == "nccl-pairs"
    assert by["nccl.localization[node3]"][0] == "nccl-pairs"  # test_node_not_blamed is a pair test
    assert by["nccl.localization[leaf2]"][0] == "nccl-blocks"
    assert by["nccl.busbw[leaf2:all_reduce:8GiB]"][0] == "nccl-blocks"
    assert by["nccl.busbw[node1:all_reduce:1GiB]"][0] == "nccl-blocks"  # intra-node
    assert by["topology.pcie_link[node1:gpu6]"][1].find("failure") is not None
    skipped = by["roce.pfc[node1:rail0]"][1].find("skipped")
    assert skipped is not None and skipped.text == "InfiniBand-only site: no roce section in the site file"
    assert not skipped.attrib  # the schema's <skipped> has no attribute: Jenkins reads the text


def canonical(root: ET.Element) -> list[tuple[str, tuple[tuple[str, str], ...], str]]:
    return [(e.tag, tuple(sorted(e.attrib.items())), (e.text or "").strip()) for e in root.iter()]


def test_the_large_run_writer_writes_the_same_document(demo_run: DemoRun) -> None:
    results = demo_run.results
    small, large = junit.build(results), junit.build(results, stream=True)
    assert validate(large.encode()) == []
    assert canonical(ET.fromstring(small)) == canonical(ET.fromstring(large))


def test_junit_escapes_and_strips_what_xml_forbids(demo_run: DemoRun) -> None:
    results = demo_run.results
    v = dict(results["verdicts"][0])
    v.update(outcome="fail", message='a<b & "c"\x07 > d\nnext', subject="n1:gpu0 <&>")
    results["verdicts"] = [v, {**v, "outcome": "skip"}, {**v, "outcome": "waived", "subject": "x"}]
    for stream in (False, True):
        text = junit.build(results, stream=stream)
        assert validate(text.encode()) == []
        root = ET.fromstring(text)
        failure = next(root.iter("failure"))
        assert failure.get("message") == 'a<b & "c" > d\nnext'
        assert [s.text for s in root.iter("skipped")] == [
            'a<b & "c" > d\nnext',
            'waived: a<b & "c" > d\nnext',
        ]


def test_pytest_junitxml_still_works_beside_ours(demo_run: DemoRun) -> None:
    ours = ET.parse(demo_run.run / "junit.xml").getroot()
    theirs = ET.parse(demo_run.pytest_junit).getroot()
    suite = theirs if theirs.tag == "testsuite" else theirs[0]
    tests = {tc.get("name"): tc for tc in suite.iter("testcase")}
    failed = tests["test_pair_busbw[node3-node4:rail5]"]
    assert failed.find("failure") is not None
    assert "busbw_GBps=25." in (failed.find("failure").get("message") or "")  # type: ignore[union-attr]
    assert (
        int(suite.get("failures", 0)) == Counter(t.find("failure") is not None for t in tests.values())[True]
    )
    # pytest's file has one case per pytest test (per subject), ours one per verdict: both are kept.
    assert len(tests) < int(ours.get("tests", 0))
    assert Path(demo_run.pytest_junit).resolve() != (demo_run.run / "junit.xml").resolve()


def test_counts_come_from_the_digest(demo_run: DemoRun) -> None:
    d = digest(demo_run.results)
    assert set(d.counts) == set(JUNIT_SUITES)
    assert sum(d.total.values()) == len(demo_run.results["verdicts"])
