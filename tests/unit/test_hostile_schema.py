"""The property test over the whole site schema (tests/unit/hostile.py): every string field, each hostile
value, is refused at load with one line naming file and key, or renders scripts that hold. A seeded sample
here; every case in benchmarks/hostile_input.py (CLUSTERACCEPT_HOSTILE_CASES=all)."""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import yaml
from hostile import HOSTILE, base_document, cases, fields, run_case, string_keys_read


def generic(key: str) -> str:
    """A key path with the site's own names (a baseline's pattern, a node type, a rail) as placeholders."""
    key = re.sub(r"^baselines\.(.+)\.(\w+)$", r"baselines.<key>.\2", key)
    key = re.sub(r"^node_types\.[^.]+", "node_types.<type>", key)
    return re.sub(r"rails\.gpu\d+", "rails.gpu<N>", key)


def prefixes(path: tuple[str | int, ...]) -> list[str]:
    """``("sim", "faults", 0, "kind")`` -> sim, sim.faults, sim.faults[0], sim.faults[0].kind (as
    Section.key names them), generic."""
    out, text = [], ""
    for p in path:
        text = f"{text}[{p}]" if isinstance(p, int) else (f"{text}.{p}" if text else str(p))
        out.append(generic(text))
    return out


SAMPLE = os.environ.get("CLUSTERACCEPT_HOSTILE_CASES", "150")
SEED = int(os.environ.get("CLUSTERACCEPT_HOSTILE_SEED", "20"))


def test_every_string_key_the_schema_reads_is_covered(tmp_path: Path) -> None:
    doc = base_document(tmp_path)
    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump(doc, sort_keys=False))
    covered = {prefix for f in fields(doc) for prefix in prefixes(f.path)}
    missing = sorted(k for k in {generic(k) for k in string_keys_read(site)} if k not in covered)
    assert missing == [], f"string keys the cases never set (add them to hostile.EXTRA): {missing}"


def test_hostile_values_are_refused_or_render_scripts_that_hold(tmp_path: Path) -> None:
    doc = base_document(tmp_path)
    chosen = cases(doc, None if SAMPLE == "all" else int(SAMPLE), SEED)
    outcomes = [run_case(doc, f, v, tmp_path) for f, v in chosen]
    bad = [f"{o.field} = {o.value[:40]!r}: {'; '.join(o.problems)}" for o in outcomes if o.problems]
    tally = Counter("refused" if o.refused else "rendered" for o in outcomes)
    n_fields = len({str(o.field) for o in outcomes})
    print(
        f"hostile input: {len(outcomes)} (field, value) cases over {n_fields} fields x {len(HOSTILE)} "
        f"values: {tally['refused']} refused at load, {tally['rendered']} rendered and held, {len(bad)} broke"
    )
    assert bad == [], "\n".join(bad[:20])
    # the two injections are among the refused, whatever the sample
    from hostile import Field

    for value in ("x\ntouch pwned\n#", "a\nb"):
        o = run_case(doc, Field(("slurm", "sbatch_options", "comment")), value, tmp_path)
        assert o.refused and "slurm.sbatch_options.comment: expected one line" in o.refused, o
