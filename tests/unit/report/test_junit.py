"""junit.xml of the demo run: valid against the Jenkins JUnit schema (tests/data/junit/jenkins-junit.xsd),
one testsuite per check family with nccl split into nodes and blocks, one testcase per item (a family on a
node or a block, as the pytest items) with the failing verdicts behind it, their numbers and evidence; the
large-run writer writes the same document; pytest's own --junitxml still works beside it."""

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


def test_one_suite_per_family_one_case_per_item(demo_run: DemoRun) -> None:
    root = ET.parse(demo_run.run / "junit.xml").getroot()
    results = demo_run.results
    # no roce or sharp items on the demo (an IB site without SHARP)
    assert [ts.get("name") for ts in root] == ["topology", "nvlink", "gpudirect", "nccl-nodes", "nccl-blocks"]
    # 4 nodes x (topology, nvlink, gpudirect, nccl) + 2 blocks + all
    assert int(root.get("tests", 0)) == 4 * 4 + 3
    by = cases(root)
    assert len(by) == int(root.get("tests", 0))  # test ids are unique
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
    assert sorted(n for n, (_, tc) in by.items() if tc.find("failure") is not None) == [
        "gpudirect[node4]", "nccl[all]", "nccl[leaf2]", "nccl[node2]", "nccl[node3]",
        "topology[node1]", "topology[node2]"]  # fmt: skip

    # the culprit: its item's message names it, then quotes the slow pairs that convicted it
    suite, tc = by["nccl[node3]"]
    assert suite == "nccl-nodes" and tc.get("classname") == "clusteraccept.nccl-nodes"
    failure = tc.find("failure")
    assert failure is not None
    message = failure.get("message", "")
    assert message.startswith("nccl.localization: culprit: node3 rail 5 is slow with every partner")
    # 2 partners x 4 sizes, and node3's retest with a healthy partner (the confirmation round) x 4 sizes
    assert "confirmed on retest: slow on 1 of 1" in message
    assert "evidence: 12 pair results involving node3 did not pass" in message
    assert "busbw_GBps=25." in message and "[pair node3-node4, rail 5, 1GiB]" in message
    # node4, slow only with node3, passes
    assert by["nccl[node4]"][1].find("failure") is None

    # a failing verdict's numbers and evidence are its item's system-out lines
    suite, tc = by["topology[node1]"]
    pcie = next(v for v in results["verdicts"] if v["subject"] == "node1:gpu6" and v["outcome"] == "fail")
    failure = tc.find("failure")
    assert failure is not None and failure.get("message") == f"{pcie['check']}: {pcie['message']}"
    out = (tc.findtext("system-out") or "").splitlines()
    assert out[0].startswith("verdicts=fail=1 pass=") and f"[{pcie['check']}[node1:gpu6]]" in out
    assert any(line.startswith("evidence=raw/probe-nodes/node1.jsonl.gz#topology/node1/") for line in out)

    suite, tc = by["nccl[leaf2]"]
    assert suite == "nccl-blocks"
    out = (tc.findtext("system-out") or "").splitlines()
    assert "key=nccl.busbw.all_reduce.block.8GiB" in out and "ref=40" in out
    ok = by["topology[node3]"][1]
    assert ok.find("failure") is None and (ok.findtext("system-out") or "").startswith("verdicts=pass=")


def test_an_item_without_a_passing_verdict_skips_with_the_reason(demo_run: DemoRun) -> None:
    results = demo_run.results
    for v in results["verdicts"]:
        if v["family"] == "topology" and v["subject"].split(":")[0] == "node4":
            v.update(outcome="skip", message="no nvidia-smi on node4")
    for stream in (False, True):
        root = ET.fromstring(junit.build(results, stream=stream))
        skipped = cases(root)["topology[node4]"][1].find("skipped")
        assert skipped is not None and skipped.text == "no nvidia-smi on node4"
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
    v.update(outcome="fail", message='a<b & "c"\x07 > d\nnext', subject="node1:gpu0 <&>")
    results["verdicts"] = [
        v,
        {**v, "outcome": "skip", "subject": "node2"},
        {**v, "outcome": "waived", "subject": "node3"},
    ]
    for stream in (False, True):
        text = junit.build(results, stream=stream)
        assert validate(text.encode()) == []
        root = ET.fromstring(text)
        failure = next(root.iter("failure"))
        assert failure.get("message") == f'{v["check"]}: a<b & "c" > d\nnext'
        assert [s.text for s in root.iter("skipped")] == [
            'a<b & "c" > d\nnext',
            'waived: a<b & "c" > d\nnext',
        ]


def test_pytest_junitxml_still_works_beside_ours(demo_run: DemoRun) -> None:
    ours = ET.parse(demo_run.run / "junit.xml").getroot()
    theirs = ET.parse(demo_run.pytest_junit).getroot()
    suite = theirs if theirs.tag == "testsuite" else theirs[0]
    tests = {tc.get("name"): tc for tc in suite.iter("testcase")}
    failed = tests["test_nccl_node[node3]"]
    assert failed.find("failure") is not None
    assert "culprit: node3 rail 5" in (failed.find("failure").get("message") or "")  # type: ignore[union-attr]
    assert (
        int(suite.get("failures", 0)) == Counter(t.find("failure") is not None for t in tests.values())[True]
    )
    # pytest's file and ours have one case per item, both kept (ours is made from the record, pytest's
    # from what this process ran)
    assert len(tests) == int(ours.get("tests", 0))
    assert Path(demo_run.pytest_junit).resolve() != (demo_run.run / "junit.xml").resolve()


def test_counts_come_from_the_digest(demo_run: DemoRun) -> None:
    d = digest(demo_run.results)
    assert set(d.counts) == set(JUNIT_SUITES) - {
        "roce",
        "efa",
        "slingshot",
        "tcpx",
        "sharp",
    }  # not on the demo (IB, no SHARP)
    assert sum(d.total.values()) == len(demo_run.results["verdicts"])
