"""gateway.core.ids: the one place the gateway mints ids."""

import re

from gateway.core.ids import new_id


def test_an_id_is_its_prefix_and_random_hex():
    assert re.fullmatch(r"resp_[0-9a-f]{32}", new_id("resp_"))
    assert re.fullmatch(r"call_[0-9a-f]{24}", new_id("call_", 24))
    assert len({new_id("x") for _ in range(1000)}) == 1000


def test_no_module_but_ids_mints_ids_with_uuid():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "gateway"
    minting = sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if "uuid" in p.read_text(encoding="utf-8"))
    assert minting == ["core/ids.py"]
