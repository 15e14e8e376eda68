from cellblock.sanitize import HostFacts, Sanitizer


def facts() -> HostFacts:
    return HostFacts(
        paths=("/home/alice/project", "/var/lib/cellblock", "/home/alice"),
        words=("buildhost-7", "alice"),
        values=("s3cr3t-token-value",),
    )


def test_redacts_paths_words_and_values() -> None:
    s = Sanitizer(facts())
    text = (
        "open /var/lib/cellblock/images/default/rootfs/etc failed on buildhost-7 for alice; "
        "token s3cr3t-token-value; see /home/alice/project/x.py"
    )
    out = s(text)
    assert "/var/lib/cellblock" not in out
    assert "buildhost-7" not in out
    assert "alice" not in out
    assert "s3cr3t-token-value" not in out
    assert out.count("<host-path>") == 2
    assert "<host>" in out and "<redacted>" in out


def test_path_boundaries_and_sandbox_paths_untouched() -> None:
    s = Sanitizer(facts())
    # "/home/alicex" is a different path; sandbox paths stay as they are.
    text = 'File "/work/main.py", line 3\n/home/alicex/file /usr/bin/python3 malice'
    assert s(text) == text


def test_extra_secrets_from_backend() -> None:
    s = Sanitizer(facts(), extra=["/srv/images/rootfs", "3f9a2c1b7d"])
    out = s("/srv/images/rootfs/ on / ro container 3f9a2c1b7d")
    assert "/srv/images/rootfs" not in out and "3f9a2c1b7d" not in out


def test_empty_and_plain_text() -> None:
    s = Sanitizer(facts())
    assert s("") == ""
    assert s("hello world 42\n") == "hello world 42\n"
