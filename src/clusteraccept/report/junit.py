"""junit.xml from results.json: one testsuite per check family (nccl split into nccl-pairs and nccl-blocks,
as suites/ split it), one testcase per verdict named ``<check>[<subject>]``.

Validated against the Jenkins JUnit schema (tests/data/junit/jenkins-junit.xsd, the junit5 project's copy
of Jenkins' dtkit junit-4.xsd): a FAIL is a ``<failure>`` carrying the verdict message, an ERROR an
``<error>``, a SKIP a ``<skipped>`` whose text is the reason, a WAIVED a ``<skipped>`` saying "waived: ...".
In that schema ``<skipped>`` is text only (no attribute; junit-xml's ``type``/``message`` attributes are
dropped), and Jenkins reads the text when there is no message attribute (junit-plugin CaseResult
getSkippedMessage: ``attributeValue("message")``, else ``getText()``). That
schema (like the xunit plugin's junit-10.xsd) has no ``<properties>`` inside a ``<testcase>`` (pytest's docs
say the same of ``record_property`` under xunit2), so each testcase's measured / ref / bounds / unit /
evidence are ``name=value`` lines of its ``<system-out>``, which Jenkins and GitLab show with the test; the
run's facts (site, run id, banner, baselines hash...) are each suite's ``<properties>``.

Written with junit-xml up to JUNIT_XML_MAX verdicts. junit-xml builds the whole tree and cleans the whole
string at the end (21 s for 500k testcases on the 2-core CI box), so a larger run (4,096 nodes: ~10^6
verdicts) is streamed by :func:`_stream` into the same document (tests check both agree).
"""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from junit_xml import TestCase, TestSuite

from clusteraccept.report.model import Digest, banner, digest, in_suite_order
from clusteraccept.rundir import read_json

JUNIT_XML_MAX = 50_000
CHUNK = 20_000  # testcases per write (cleaned of illegal characters as one string)
# Characters XML 1.0 forbids (junit-xml strips the same set).
_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_CHILD = {"fail": "failure", "error": "error", "skip": "skipped", "waived": "skipped"}
_TYPE = {"fail": "failure", "error": "error", "skip": "skipped", "waived": "skipped"}


def _clean(text: str) -> str:
    return _ILLEGAL.sub("", text)


def _text(s: str) -> str:
    """Escaped element text."""
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _attr(s: str) -> str:
    """Escaped, double-quoted attribute value (newlines kept as character references, as ElementTree does)."""
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    if "\n" in s or "\r" in s or "\t" in s:
        s = s.replace("\n", "&#10;").replace("\r", "&#13;").replace("\t", "&#09;")
    return f'"{s}"'


def system_out(v: Mapping[str, Any]) -> str:
    """The verdict's numbers and evidence as ``name=value`` lines (hot: once per verdict)."""
    out = ""
    value, ref, lo, hi = v.get("value"), v.get("ref"), v.get("lower"), v.get("upper")
    if value is not None:
        out = f"measured={value:.6g}\n" if value.__class__ is float else f"measured={value}\n"
    if ref is not None:
        out += f"ref={ref:.6g}\n"
    if lo is not None or hi is not None:
        out += f"bounds=[{'-inf' if lo is None else f'{lo:.6g}'}, {'inf' if hi is None else f'{hi:.6g}'}]\n"
    unit = v.get("unit")
    if unit:
        out += f"unit={unit}\n"
    labels = v.get("labels")
    if labels:
        key = labels.get("key")
        if key:
            out += f"key={key}\n"
    for e in v.get("evidence") or ():
        out += f"evidence={e}\n"
    return out[:-1]


def _by_suite(results: Mapping[str, Any], d: Digest) -> dict[str, list[Mapping[str, Any]]]:
    by: dict[str, list[Mapping[str, Any]]] = {}
    for v, suite in zip(results.get("verdicts", []), d.suites, strict=True):
        bucket = by.get(suite)
        if bucket is None:
            bucket = by[suite] = []
        bucket.append(v)
    return in_suite_order(by)


def properties(results: Mapping[str, Any], d: Digest) -> dict[str, str]:
    props = {
        "site": results.get("site"),
        "run_id": results.get("run_id"),
        "started": results.get("started"),
        "ended": results.get("ended"),
        "verdict": banner(results, d.total).verdict,
        "simulated": bool(results.get("simulated")),
        "suite_revision": results.get("suite_revision"),
        "baselines_file": results.get("baselines_file"),
        "baselines_sha256": results.get("baselines_sha256"),
        "rejudged": results.get("rejudged"),
        "signoff": " / ".join(x for x in (results.get("signoff") or {}).values() if x) or None,
    }
    return {k: _clean(str(v)) for k, v in props.items() if v not in (None, "")}


def _junit_xml(results: Mapping[str, Any], d: Digest) -> str:
    """The document through junit-xml's model (runs up to JUNIT_XML_MAX verdicts)."""
    props, stamp = properties(results, d), str(results.get("started") or "")
    root = ET.Element("testsuites")
    totals = {"disabled": 0, "errors": 0, "failures": 0, "tests": 0}
    for suite, vs in _by_suite(results, d).items():
        tcs = []
        for v in vs:
            out = _clean(system_out(v))
            name = _clean(f"{v['check']}[{v['subject']}]")
            tc = TestCase(name, classname=f"clusteraccept.{suite}", stdout=out or None)
            outcome, message = v["outcome"], _clean(v.get("message") or "")
            if outcome == "fail":
                tc.add_failure_info(message=message)
            elif outcome == "error":
                tc.add_error_info(message=message)
            elif outcome == "skip":
                tc.add_skipped_info(output=message)
            elif outcome == "waived":
                tc.add_skipped_info(output=f"waived: {message}")
            tcs.append(tc)
        el = TestSuite(suite, tcs, properties=props, timestamp=stamp or None).build_xml_doc(encoding="utf-8")
        for skipped in el.iter("skipped"):
            skipped.attrib.pop("type", None)  # the schema's <skipped> is text only (see the module doc)
        for k in totals:
            totals[k] += int(el.get(k, 0))
        root.append(el)
    for k, n in totals.items():
        root.set(k, str(n))
    root.set("time", "0.0")
    return '<?xml version="1.0" ?>\n' + ET.tostring(root, encoding="unicode")


def _stream(results: Mapping[str, Any], d: Digest, out: IO[str]) -> None:
    """The same document as :func:`_junit_xml` (elements, attributes, counts), written as it goes."""
    per = _by_suite(results, d)
    props = "".join(
        f"<property name={_attr(k)} value={_attr(v)} />" for k, v in properties(results, d).items()
    )
    stamp = str(results.get("started") or "")
    totals = {"disabled": 0, "errors": 0, "failures": 0, "tests": 0}
    for suite, vs in per.items():
        c: Mapping[str, int] = d.counts.get(suite) or {}
        totals["errors"] += c.get("error", 0)
        totals["failures"] += c.get("fail", 0)
        totals["tests"] += len(vs)
    out.write('<?xml version="1.0" ?>\n<testsuites ' + " ".join(f'{k}="{v}"' for k, v in totals.items()))
    out.write(' time="0.0">')
    for suite, vs in per.items():
        c = d.counts.get(suite) or {}
        skipped = c.get("skip", 0) + c.get("waived", 0)
        ts = f" timestamp={_attr(stamp)}" if stamp else ""
        out.write(
            f'<testsuite disabled="0" errors="{c.get("error", 0)}" failures="{c.get("fail", 0)}" '
            f'name={_attr(suite)} skipped="{skipped}" tests="{len(vs)}" time="0"{ts}>'
        )
        if props:
            out.write(f"<properties>{props}</properties>")
        classname = _attr(f"clusteraccept.{suite}")
        buf: list[str] = []
        for v in vs:
            outcome = v["outcome"]
            head = f"<testcase name={_attr(v['check'] + '[' + v['subject'] + ']')} classname={classname}"
            so = system_out(v)
            child = _CHILD.get(outcome)
            if child is None and not so:
                buf.append(head + " />")
            else:
                body = ""
                if child:
                    msg = v.get("message") or ""
                    if child == "skipped":
                        body = f"<skipped>{_text('waived: ' + msg if outcome == 'waived' else msg)}</skipped>"
                    else:
                        body = f'<{child} type="{_TYPE[outcome]}" message={_attr(msg)} />'
                if so:
                    body += f"<system-out>{_text(so)}</system-out>"
                buf.append(f"{head}>{body}</testcase>")
            if len(buf) >= CHUNK:
                out.write(_clean("".join(buf)))
                buf.clear()
        out.write(_clean("".join(buf)))
        out.write("</testsuite>")
    out.write("</testsuites>\n")


def write_junit(run_dir: Path, results: Mapping[str, Any] | None = None, d: Digest | None = None) -> Path:
    data = results if results is not None else read_json(run_dir / "results.json")
    d = d or digest(data)
    out = run_dir / "junit.xml"
    tmp = out.with_suffix(".xml.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        if len(data.get("verdicts", ())) <= JUNIT_XML_MAX:
            fh.write(_junit_xml(data, d))
        else:
            _stream(data, d, fh)
    tmp.replace(out)
    return out


def build(results: Mapping[str, Any], stream: bool = False) -> str:
    """The junit.xml text (``stream``: through the large-run writer)."""
    d = digest(results)
    if not stream:
        return _junit_xml(results, d)
    buf = io.StringIO()
    _stream(results, d, buf)
    return buf.getvalue()
