"""Hostile input in a site file: what reaches a script, an argv or a Slurm option is refused at load with
one line naming the file and key, and credentials stay out of every file the suite writes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_site import _error  # one reader of a site error: one line, naming the file

from clusteraccept.errors import SiteConfigError
from clusteraccept.site.env_file import exported, read_env_file
from clusteraccept.site.load import load_site

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "site-configs"
DEMO = (CONFIGS / "demo.yaml").read_text()


def _slurm(extra: str) -> str:
    """The demo site with ``extra`` lines added at the top of its slurm section."""
    assert "\nslurm:\n" in DEMO
    return DEMO.replace("\nslurm:\n", "\nslurm:\n" + extra, 1)


def test_a_newline_in_an_sbatch_option_is_refused_at_load(tmp_path: Path) -> None:
    # the injection: the middle line ran as a command, every #SBATCH line after it was dropped
    msg = _error(tmp_path, _slurm('  sbatch_options: {comment: "x\\ntouch pwned\\n#"}\n'))
    assert "slurm.sbatch_options.comment: expected one line of text without control characters" in msg
    assert "got '\\n' at character 2 of 'x\\ntouch pwned\\n#'" in msg
    msg = _error(tmp_path, _slurm('  sbatch_options: {comment: "a\\nb"}\n'))
    assert "slurm.sbatch_options.comment" in msg


ENV = "\nenv:\n"


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("\nnodes:", '\nsetup: ["module load x\\rtouch pwned"]\nnodes:', "setup[0]: "),
        (ENV, ENV + '  FOO: "a\\u0000b"\n', "env.FOO: "),
        (ENV, ENV + '  "FO\\nO": a\n', "env.'FO\\nO': expected a key without control characters"),
        ('description: "Virtual', 'description: "\\u001b[31mVirtual', "description: "),
        ("  qos: x\n", '  qos: "a\\u2028b"\n', "slurm.qos: "),
    ],
)
def test_control_characters_anywhere_are_refused_with_their_key(
    tmp_path: Path, old: str, new: str, key: str
) -> None:
    text = _slurm("  qos: x\n")
    assert old in text
    msg = _error(tmp_path, text.replace(old, new, 1))
    assert f"{key}" in msg and "control characters" in msg, msg


def test_a_description_may_span_lines(tmp_path: Path) -> None:
    f = tmp_path / "site.yaml"
    text = "\n".join(ln for ln in DEMO.splitlines() if not ln.startswith("description:"))
    f.write_text(text + '\ndescription: "first line\\nsecond\\tline"\n')
    assert load_site(str(f), CONFIGS).description == "first line\nsecond\tline"


@pytest.mark.parametrize(
    ("option", "hint"),
    [
        ("nodes: 64", "the plan sets it for each job"),
        ("output: /tmp/x", "the suite writes each job's logs into the run directory"),
        ("partition: other", "use slurm.partition"),
        ("export: NONE", "credentials in env_file"),
        ("signal: B:USR1@60", "--signal=B:USR2"),
        ("job_name: mine", "clusteraccept-<job>"),
    ],
)
def test_sbatch_options_the_suite_manages_are_refused_with_the_key_to_use(
    tmp_path: Path, option: str, hint: str
) -> None:
    msg = _error(tmp_path, _slurm(f"  sbatch_options: {{{option}}}\n"))
    assert "expected an option the suite does not set itself" in msg and hint in msg, msg


def test_sbatch_option_names_are_long_options_each_given_once(tmp_path: Path) -> None:
    msg = _error(tmp_path, _slurm('  sbatch_options: {"--comment": x}\n'))
    assert "expected an sbatch long option name without dashes" in msg
    msg = _error(tmp_path, _slurm("  sbatch_options: {mem_per_cpu: 1G, mem-per-cpu: 2G}\n"))
    assert "expected each option once, got --mem-per-cpu also as 'mem_per_cpu'" in msg


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("partition", "'gpu;rm'"),
        ("partition", "-gpu"),
        ("account", "'a b'"),
        ("qos", "'$(x)'"),
        ("reservation", "'`x`'"),
        ("constraint", "--x"),
    ],
)
def test_slurm_names_are_names(tmp_path: Path, key: str, value: str) -> None:
    text = (DEMO.replace("  partition: gpu\n", "", 1) if key == "partition" else DEMO).replace(
        "\nslurm:\n", f"\nslurm:\n  {key}: {value}\n", 1
    )
    assert f"slurm.{key}: expected " in _error(tmp_path, text)


@pytest.mark.parametrize("key", ["python", "slurm_conf", "bin_dir"])
def test_a_path_that_would_read_as_an_option_is_refused(tmp_path: Path, key: str) -> None:
    text = "\n".join(ln for ln in DEMO.splitlines() if not ln.startswith(f"  {key}:")) + "\n"
    text = text.replace("\nslurm:\n", f"\nslurm:\n  {key}: --help\n", 1)
    assert f"slurm.{key}: expected " in _error(tmp_path, text)


def test_a_partition_list_is_accepted(tmp_path: Path) -> None:
    f = tmp_path / "site.yaml"
    f.write_text(DEMO.replace("  partition: gpu\n", "  partition: gpu,gpu-spare\n"))
    assert load_site(str(f), CONFIGS).slurm.partition == "gpu,gpu-spare"


@pytest.mark.parametrize("netdev", ["eth0/x", "-x", "a:b", "averyveryverylong0", ".."])
def test_netdev_names_are_what_the_kernel_allows(tmp_path: Path, netdev: str) -> None:
    text = (CONFIGS / "example-h100-ib.yaml").read_text().replace("netdev: ibp94s0", f"netdev: '{netdev}'")
    assert "netdev: expected a network interface name" in _error(tmp_path, text)


def test_node_names_are_host_names(tmp_path: Path) -> None:
    msg = _error(tmp_path, DEMO.replace('nodes: "node[1-4]"', 'nodes: ["node[1-4]", "x$(id)"]'))
    assert "nodes: expected node names of letters, digits" in msg and "'x$(id)'" in msg


# --- credentials -------------------------------------------------------------------------------------


def test_a_credential_in_the_site_file_is_refused_saying_how_to_pass_it(tmp_path: Path) -> None:
    msg = _error(tmp_path, DEMO.replace("\nenv:\n", "\nenv:\n  MY_API_TOKEN: hunter2\n", 1))
    assert "env.MY_API_TOKEN: expected no credentials in the site file" in msg
    assert "env_file names (mode 0600), or export it where you submit" in msg and "hunter2" not in msg


def test_the_env_file_is_owner_only_and_its_bad_lines_are_not_shown(tmp_path: Path) -> None:
    f = tmp_path / "creds.env"
    f.write_text("# site credentials\nexport MY_API_TOKEN=s3cr3t\n\nOTHER_KEY=a=b\n")
    f.chmod(0o644)
    owner_only = r"only its owner can read \(chmod 600\), got .*creds.env of mode 0644"
    with pytest.raises(SiteConfigError, match=owner_only):
        read_env_file(str(f))
    f.chmod(0o600)
    assert read_env_file(str(f)) == {"MY_API_TOKEN": "s3cr3t", "OTHER_KEY": "a=b"}
    f.write_text("MY_API_TOKEN s3cr3t\n")
    with pytest.raises(SiteConfigError) as exc:
        read_env_file(str(f))
    assert "line 1: expected NAME=value" in str(exc.value) and "s3cr3t" not in str(exc.value)


def test_exported_values_are_gone_afterwards() -> None:
    os.environ.pop("CA_TEST_TOKEN", None)
    with exported({"CA_TEST_TOKEN": "v"}):
        assert os.environ["CA_TEST_TOKEN"] == "v"
    assert "CA_TEST_TOKEN" not in os.environ


def test_the_job_gets_the_credential_and_no_file_of_the_run_holds_it(tmp_path: Path) -> None:
    """A planted credential reaches a local job through the submitting environment; grep -r of the whole
    run directory (job scripts, submitit's pickles and logs, the spool) does not find it."""
    from clusteraccept.jobs.submit import JobLayer

    secret = "canary-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:16]
    creds = tmp_path / "creds.env"
    creds.write_text(f"MY_API_TOKEN={secret}\n")
    creds.chmod(0o600)
    site_file = tmp_path / "site.yaml"
    site_file.write_text(DEMO + f"env_file: {creds}\n")
    site = load_site(str(site_file), CONFIGS)
    run = tmp_path / "run"
    layer = JobLayer(site, run, executor="local")
    digest = hashlib.sha256(secret.encode()).hexdigest()
    # the job's own check, with the digest in its pickle and not the value
    sees = ["sh", "-c", 'printf %s "$MY_API_TOKEN" | sha256sum | grep -q "^$1 "', "sh", digest]
    job = layer._submit("probe-secret", {"time": 5}, subprocess.call, sees)
    assert job.result() == 0  # the job saw it
    assert "MY_API_TOKEN" not in os.environ
    found = subprocess.run(["grep", "-rl", secret, str(run)], capture_output=True, text=True, check=False)
    assert found.returncode == 1 and not found.stdout, found.stdout


# --- a closed pipe -----------------------------------------------------------------------------------


def test_a_cli_whose_reader_goes_away_exits_quietly(tmp_path: Path) -> None:
    """``python -m clusteraccept.parsers lsmod FILE | head -1``: exit 1 (as Python on EPIPE), no traceback.
    The output is larger than a pipe's buffer, so the write after the close must fail."""
    big = tmp_path / "lsmod.txt"
    rows = [f"mod{i:05d}               16384  0" for i in range(20_000)]
    big.write_text("Module                  Size  Used by\n" + "\n".join(rows) + "\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "clusteraccept.parsers", "lsmod", str(big)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().strip() == b"{"
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1 and err == "", err


@pytest.mark.parametrize("line", ["echo 'it", "module load nccl \\\\"])
def test_a_setup_line_that_would_swallow_the_script_after_it_is_refused(tmp_path: Path, line: str) -> None:
    text = DEMO.replace("\nnodes:", f'\nsetup: ["{line}"]\nnodes:', 1)
    assert "setup[0]: expected one complete shell line" in _error(tmp_path, text)


def test_a_block_name_that_is_not_a_name_is_refused(tmp_path: Path) -> None:
    msg = _error(tmp_path, DEMO.replace("  leaf1: ", "  'leaf/1': ", 1))
    assert "blocks.'leaf/1': expected a block name like 'leaf1'" in msg


def test_pytest_item_errors_are_never_injected_faults(tmp_path: Path) -> None:
    from clusteraccept.sim.injected import pytest_errors

    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest"><testcase classname="suites.test_topology" name="t[node1]">'
        '<error message="OSError"/></testcase><testcase classname="c" name="ok"/></testsuite></testsuites>'
    )
    assert pytest_errors(junit) == ("suites.test_topology::t[node1] (pytest error)",)
