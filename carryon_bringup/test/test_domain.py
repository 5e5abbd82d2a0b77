from __future__ import annotations

import pytest

from carryon_bringup.core import domain


def test_reservations_are_exclusive_and_released(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(domain.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(domain, "DOMAIN_POOL", range(5, 7))
    first = domain.reserve_domain_id()
    second = domain.reserve_domain_id()
    assert {first.domain_id, second.domain_id} == {5, 6}
    with pytest.raises(domain.NoFreeDomainError):
        domain.reserve_domain_id()
    first.release()
    assert domain.reserve_domain_id().domain_id == first.domain_id


def test_excluded_ids_are_never_reserved(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(domain.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(domain, "DOMAIN_POOL", range(1, 4))
    held = [domain.reserve_domain_id(exclude=[2]) for _ in range(2)]
    assert sorted(r.domain_id for r in held) == [1, 3]


def test_pool_stays_below_the_linux_ephemeral_port_range() -> None:
    assert min(domain.DOMAIN_POOL) >= 1 and max(domain.DOMAIN_POOL) <= 101
