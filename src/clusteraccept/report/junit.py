"""junit.xml from results.json: one testsuite per check family (nccl split into nccl-nodes and nccl-blocks,
as suites/ split it), one testcase per item (judge/items.py: a family on a node or a block), named
``<family>[<subject>]``, as the pytest items are. A failing item's message holds the verdicts behind it
(and a node's failing pair results, its evidence); every verdict stays in results.json and report.html.
At 16,384 nodes that is ~65,000 testcases, where one per verdict was millions (157 MB at 4,096 nodes).

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

Written with junit-xml up to JUNIT_XML_MAX testcases. junit-xml builds the whole tree and cleans the whole
string at the end (21 s for 500k testcases on the 2-core CI box), so a larger run is streamed by
:func:`_stream` into the same document (tests check both agree).
"""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from junit_xml import TestCase, TestSuite

from clusteraccept.judge import record
from clusteraccept.judge.items import NODE, SHOWN, Items, counts_line, failure_lines, group, outcome_of
from clusteraccept.report.model import Digest, banner, digest, in_suite_order, item_owners

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
    """The verdict's numbers and evidence as ``name=value`` lines."""
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


@dataclass(frozen=True)
class Case:
    """One testcase: an item's outcome, its failure message and its ``system-out``."""

    name: str
    outcome: str
    message: str
    out: str


def _case(family: str, subject: str, vs: list[Mapping[str, Any]], items: Items) -> Case:
    outcome = outcome_of(vs)
    out = "verdicts=" + counts_line(vs)
    message = ""
    if outcome in ("fail", "error"):
        ev, n = items.evidence.get(subject, ()), items.evidence_n.get(subject, 0)
        message = "\n".join(failure_lines(vs, subject, ev, n))
        bad = [v for v in vs if v["outcome"] in ("fail", "error")][:SHOWN]
        out += "".join(f"\n[{v['check']}[{v['subject']}]]\n{system_out(v)}" for v in bad)
    elif outcome in ("skip", "waived"):
        message = "; ".join(dict.fromkeys(v.get("message") or "" for v in vs if v["outcome"] == outcome))
    return Case(f"{family}[{subject}]", outcome, message, out)


def cases(results: Mapping[str, Any]) -> dict[str, list[Case]]:
    """The run's items as testcases, by suite, in the families' order."""
    nodes, blocks = item_owners(results)
    items = group(results.get("verdicts", []), nodes, blocks)
    by: dict[str, list[Case]] = {}
    for (family, per, subject), vs in items.owned.items():
        suite = family if family != "nccl" else ("nccl-nodes" if per == NODE else "nccl-blocks")
        by.setdefault(suite, []).append(_case(family, subject, vs, items))
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


def _junit_xml(results: Mapping[str, Any], d: Digest, per: Mapping[str, list[Case]]) -> str:
    """The document through junit-xml's model (runs up to JUNIT_XML_MAX testcases)."""
    props, stamp = properties(results, d), str(results.get("started") or "")
    root = ET.Element("testsuites")
    totals = {"disabled": 0, "errors": 0, "failures": 0, "tests": 0}
    for suite, cs in per.items():
        tcs = []
        for c in cs:
            tc = TestCase(_clean(c.name), classname=f"clusteraccept.{suite}", stdout=_clean(c.out) or None)
            message = _clean(c.message)
            if c.outcome == "fail":
                tc.add_failure_info(message=message)
            elif c.outcome == "error":
                tc.add_error_info(message=message)
            elif c.outcome == "skip":
                tc.add_skipped_info(output=message)
            elif c.outcome == "waived":
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


def _stream(results: Mapping[str, Any], d: Digest, per: Mapping[str, list[Case]], out: IO[str]) -> None:
    """The same document as :func:`_junit_xml` (elements, attributes, counts), written as it goes."""
    props = "".join(
        f"<property name={_attr(k)} value={_attr(v)} />" for k, v in properties(results, d).items()
    )
    stamp = str(results.get("started") or "")
    counts = {s: Counter(c.outcome for c in cs) for s, cs in per.items()}
    totals = {"disabled": 0, "errors": 0, "failures": 0, "tests": 0}
    for suite, cs in per.items():
        totals["errors"] += counts[suite]["error"]
        totals["failures"] += counts[suite]["fail"]
        totals["tests"] += len(cs)
    out.write('<?xml version="1.0" ?>\n<testsuites ' + " ".join(f'{k}="{v}"' for k, v in totals.items()))
    out.write(' time="0.0">')
    for suite, cs in per.items():
        c = counts[suite]
        skipped = c["skip"] + c["waived"]
        ts = f" timestamp={_attr(stamp)}" if stamp else ""
        out.write(
            f'<testsuite disabled="0" errors="{c["error"]}" failures="{c["fail"]}" '
            f'name={_attr(suite)} skipped="{skipped}" tests="{len(cs)}" time="0"{ts}>'
        )
        if props:
            out.write(f"<properties>{props}</properties>")
        classname = _attr(f"clusteraccept.{suite}")
        buf: list[str] = []
        for case in cs:
            head = f"<testcase name={_attr(case.name)} classname={classname}"
            child = _CHILD.get(case.outcome)
            if child is None and not case.out:
                buf.append(head + " />")
            else:
                body = ""
                if child:
                    msg = case.message
                    if child == "skipped":
                        text = "waived: " + msg if case.outcome == "waived" else msg
                        body = f"<skipped>{_text(text)}</skipped>"
                    else:
                        body = f'<{child} type="{_TYPE[case.outcome]}" message={_attr(msg)} />'
                if case.out:
                    body += f"<system-out>{_text(case.out)}</system-out>"
                buf.append(f"{head}>{body}</testcase>")
            if len(buf) >= CHUNK:
                out.write(_clean("".join(buf)))
                buf.clear()
        out.write(_clean("".join(buf)))
        out.write("</testsuite>")
    out.write("</testsuites>\n")


def write_junit(run_dir: Path, results: Mapping[str, Any] | None = None, d: Digest | None = None) -> Path:
    data = results if results is not None else record.load(run_dir)
    d = d or digest(data)
    per = cases(data)
    out = run_dir / "junit.xml"
    tmp = out.with_suffix(".xml.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        if sum(len(cs) for cs in per.values()) <= JUNIT_XML_MAX:
            fh.write(_junit_xml(data, d, per))
        else:
            _stream(data, d, per, fh)
    tmp.replace(out)
    return out


def build(results: Mapping[str, Any], stream: bool = False) -> str:
    """The junit.xml text (``stream``: through the large-run writer)."""
    d, per = digest(results), cases(results)
    if not stream:
        return _junit_xml(results, d, per)
    buf = io.StringIO()
    _stream(results, d, per, buf)
    return buf.getvalue()
