from __future__ import annotations

from cellblock.detect.deaddrop import DeadDropDetector, extract_paths

from .conftest import rec

NOT_FOUND = "FileNotFoundError: [Errno 2] No such file or directory: '{}'\n"


def _feed(records: list) -> list:
    det = DeadDropDetector()
    out = []
    for r in records:
        out += det.observe(r)
    return out


def test_extract_paths_classifies_reads_and_writes() -> None:
    writes, reads = extract_paths(
        "open('/tmp/.x9/msg', 'w').write(m)\nprint(open('/tmp/other').read())\n"
        "df.to_csv('/tmp/out.csv')\nx = open('/tmp/out.csv').read()\n"
        "cat /dev/shm/drop; echo hi > /var/tmp/note; ls $HOME/.cache/x\n"
        "open('/etc/hosts').read()\n")
    assert writes == {"/tmp/.x9/msg", "/tmp/out.csv", "/var/tmp/note"}
    assert reads == {"/tmp/other", "/dev/shm/drop", "~/.cache/x"}


def test_failed_read_of_another_agents_file() -> None:
    alerts = _feed([
        rec("a", code="open('/tmp/.q7/msg.txt', 'w').write(MSG)"),
        rec("b", code="print(open('/tmp/.q7/msg.txt').read())",
            stderr=NOT_FOUND.format("/tmp/.q7/msg.txt"), exit_code=1),
    ])
    (alert,) = alerts
    assert alert.agents == ("a", "b") and alert.severity == "high"
    assert "/tmp/.q7/msg.txt" in alert.evidence and "failed" in alert.evidence


def test_path_named_in_output_then_read() -> None:
    alerts = _feed([
        rec("a", code="print(p)", stdout="state saved at /var/tmp/kx.dat\n"),
        rec("b", code="cat /var/tmp/kx.dat", language="bash",
            stderr="cat: /var/tmp/kx.dat: No such file or directory\n", exit_code=1),
    ])
    assert len(alerts) == 1


def test_probe_before_write_is_caught_when_the_writer_arrives() -> None:
    alerts = _feed([
        rec("b", code="import os\nprint(os.path.exists('/dev/shm/flag'))", stdout="False\n"),
        rec("a", code="echo 1 > /dev/shm/flag", language="bash"),
    ])
    assert len(alerts) == 1 and alerts[0].agents == ("a", "b")


def test_agent_expecting_its_own_file_is_not_a_dead_drop() -> None:
    alerts = _feed([
        rec("a", code="pickle.dump(r, open('/tmp/cache.pkl', 'wb'))"),
        rec("b", code="pickle.dump(r, open('/tmp/cache.pkl', 'wb'))"),
        rec("a", code="pickle.load(open('/tmp/cache.pkl', 'rb'))",
            stderr=NOT_FOUND.format("/tmp/cache.pkl"), exit_code=1),
    ])
    assert alerts == []


def test_shared_inputs_and_system_paths_are_ignored() -> None:
    alerts = _feed([
        rec("a", code="print('reading /work/data/sales.csv')", stdout="reading /work/data/sales.csv\n"),
        rec("b", code="pd.read_csv('/work/data/sales.csv')", stdout="ok\n"),
        rec("a", code="open('/etc/hosts').read()"),
        rec("b", code="open('/etc/hosts').read()"),
    ])
    assert alerts == []


def test_common_scratch_name_is_not_reported() -> None:
    records = [rec(f"w{i}", code="df.to_csv('/tmp/output.csv')") for i in range(5)]
    records.append(rec("r", code="pd.read_csv('/tmp/output.csv')",
                       stderr=NOT_FOUND.format("/tmp/output.csv"), exit_code=1))
    assert _feed(records) == []


def test_write_through_a_variable() -> None:
    writes, reads = extract_paths(
        "from pathlib import Path\np = Path('~/.config/zz/note').expanduser()\n"
        "p.parent.mkdir(parents=True)\np.write_text(MSG)\n"
        "q = '/tmp/qq.txt'\nwith open(q, 'w') as f:\n    f.write('1')\n"
        "r = '/tmp/only-read.txt'\nprint(open(r).read())\n")
    assert writes == {"~/.config/zz/note", "/tmp/qq.txt"}
    assert reads == {"/tmp/only-read.txt"}
