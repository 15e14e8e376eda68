"""The public surface is deliberate: adding or removing a name is an API change."""

import cellblock


def test_exported_members() -> None:
    assert sorted(cellblock.__all__) == sorted([
        "Backend",
        "BackendNotFound",
        "BackendOptions",
        "CellblockError",
        "ExecResult",
        "ImageNotFound",
        "NetworkPolicy",
        "Policy",
        "PolicyError",
        "ProtectionUnavailable",
        "RunRecord",
        "Sandbox",
        "SandboxUnavailable",
        "__version__",
        "available_backends",
        "register_backend",
    ])
    for name in cellblock.__all__:
        assert hasattr(cellblock, name), name


def test_errors_never_render_their_detail() -> None:
    exc = cellblock.SandboxUnavailable(detail="/var/lib/docker/containers/abc123 exploded")
    assert "abc123" not in str(exc)
    assert "/var/lib/docker" not in repr(exc.args)
    assert "abc123" in exc.operator_message()


def test_builtin_backends_are_registered() -> None:
    assert {"bwrap", "docker", "gvisor"} <= set(cellblock.available_backends())
