"""The backup's tables against the store's: every table is in the document or left out with a reason, and each record
(berth/contracts/backup.py) has its table's columns — no more, no fewer — with each string column's length and
nullability, so that a restored row is one the table takes."""

from __future__ import annotations

import pytest
from sqlalchemy import String

from berth.contracts import BackupTables
from server.store.backup import BACKED_UP, LEFT_OUT
from server.store.tables import Base

pytestmark = pytest.mark.timeout(30)


def test_every_table_is_backed_up_or_left_out_with_a_reason() -> None:
    backed_up = {name for name, _row, _part in BACKED_UP}
    assert backed_up.isdisjoint(LEFT_OUT)
    assert backed_up | set(LEFT_OUT) == set(Base.metadata.tables)
    assert all(reason for reason in LEFT_OUT.values())
    assert list(BackupTables.model_fields) == [name for name, _row, _part in BACKED_UP]


@pytest.mark.parametrize(("name", "row", "part"), BACKED_UP, ids=[name for name, _row, _part in BACKED_UP])
def test_each_record_has_its_tables_columns(name: str, row: type[Base], part: type) -> None:
    columns = {column.key: column for column in row.__table__.columns}
    assert row.__tablename__ == name
    assert set(part.model_fields) == set(columns)
    schema = part.model_json_schema()["properties"]
    for key, column in columns.items():
        options = schema[key].get("anyOf", [schema[key]])
        assert ("null" in [option.get("type") for option in options]) == bool(column.nullable), key
        if isinstance(column.type, String) and column.type.length:
            lengths = [option.get("maxLength") for option in options if option.get("type") == "string"]
            assert lengths == [column.type.length], key
