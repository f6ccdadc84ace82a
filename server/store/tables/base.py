"""The declarative base every table of the store derives from (one metadata: the migrations' and the store's)."""

from __future__ import annotations

from sqlalchemy.orm import DeclarativeBase


class Base(DeclarativeBase):
    pass
