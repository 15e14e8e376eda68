import pytest
from pydantic import ValidationError

from cellblock import NetworkPolicy, Policy


def test_defaults_deny() -> None:
    p = Policy()
    assert p.network.mode == "none"
    assert dict(p.env) == {}
    assert p.unsafe_allow_missing == frozenset()
    assert (p.timeout_s, p.memory_mb, p.max_pids, p.scratch_mb) == (10, 256, 64, 64)
    assert p.output_limit_bytes == 64 * 1024


def test_network_shorthand() -> None:
    assert Policy(network="none").network == NetworkPolicy()  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        Policy(network="all")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"timeout_s": 0},
        {"timeout_s": -1},
        {"memory_mb": 1},
        {"max_pids": 0},
        {"scratch_mb": 0},
        {"output_limit_bytes": 10},
        {"env": {"PATH": "/evil"}},
        {"env": {"HOME": "/root"}},
        {"env": {"1BAD": "x"}},
        {"env": {"A": "nul\0byte"}},
        {"unsafe_allow_missing": {"everything"}},
        {"unknown_field": 1},
    ],
)
def test_rejects_out_of_range(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Policy(**kwargs)  # type: ignore[arg-type]


def test_frozen_including_env() -> None:
    p = Policy(env={"MODE": "x"})
    with pytest.raises(ValidationError):
        p.timeout_s = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        p.env["MODE"] = "y"  # type: ignore[index]
    assert hash(p) == hash(Policy(env={"MODE": "x"}))


def test_allowlist_needs_hosts() -> None:
    with pytest.raises(ValidationError):
        NetworkPolicy(mode="allowlist")
    with pytest.raises(ValidationError):
        NetworkPolicy(mode="none", allow=("example.com",))
