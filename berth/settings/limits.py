"""The gateway's limits settings: the cluster's LimitPolicy (`BERTH_LIMITS_FILE`) and the Redis the endpoint
proxies and gateways share their counters through (`BERTH_REDIS_URL`). Part of berth.settings, which
re-exports every name: import from there."""

from __future__ import annotations

import os
from pathlib import Path

from berth.contracts.limits import LimitPolicy, limit_policy_from
from berth.errors import UserInputError


def limits_file() -> Path | None:
    """`BERTH_LIMITS_FILE`: a JSON or YAML file holding the cluster's LimitPolicy; None: the defaults."""
    value = os.environ.get("BERTH_LIMITS_FILE", "").strip()
    return Path(value) if value else None


def limit_policy() -> LimitPolicy:
    """The cluster's limits: `BERTH_LIMITS_FILE`'s, or every limit off but the 1 MiB body limit. A file
    that is configured but missing, unreadable or invalid is an error, never a fallback to no limits."""
    path = limits_file()
    if path is None:
        return LimitPolicy()
    return read_limit_policy(path, f"BERTH_LIMITS_FILE {path}")


def read_limit_policy(path: Path, where: str) -> LimitPolicy:
    """The LimitPolicy in a JSON (`.json`) or YAML file, with the fields it sets; a file that cannot be
    read, parsed or validated is a one-line error naming `where`."""
    import yaml  # here, not above: the CLI's start imports the settings, and YAML is 14 ms of it (issue 33)

    from berth.bounded_parse import load_json, load_yaml

    try:
        text = path.read_text()
    except OSError as error:
        raise UserInputError(f"{where} cannot be read: {error.strerror or error}.") from None
    try:
        data = load_json(text, where) if path.suffix == ".json" else load_yaml(text, where)
    except UserInputError:
        raise  # nested too deep, or a YAML alias: its own line, naming `where`
    except (ValueError, yaml.YAMLError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserInputError(f"{where} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: "
                             f"{first_line}") from None
    return limit_policy_from({} if data is None else data, where)


def redis_url() -> str | None:
    """`BERTH_REDIS_URL`: the Redis several proxies share their limit counters through (redis://…); None:
    each proxy counts in its own memory."""
    return os.environ.get("BERTH_REDIS_URL", "").strip() or None
