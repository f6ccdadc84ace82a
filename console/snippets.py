"""Copy-paste snippets for calling an endpoint: curl, the OpenAI Python SDK and an opencode.json (built by
berth/opencode.py, the same builder `berth endpoint opencode-config` uses). The token is written in when
the page has just generated one, else the snippets read $BERTH_TOKEN."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from berth.contracts import ServedModel
from berth.errors import BerthError
from berth.opencode import TOKEN_ENV, opencode_config, served_target

HELLO = [{"role": "user", "content": "Hello!"}]


@dataclass(frozen=True)
class Snippets:
    curl: str
    python: str
    opencode: str | None  # None: no model facts to write one from (the reason is in `opencode_note`)
    opencode_note: str | None


def api_base(url: str) -> str:
    """The OpenAI-compatible base: the endpoint URL with /v1 once (the API answers it without)."""
    trimmed = url.rstrip("/")
    return trimmed if trimmed.endswith("/v1") else trimmed + "/v1"


def _shell_single_quoted(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def curl_snippet(url: str, model: str, token: str | None) -> str:
    bearer = token if token else "$" + TOKEN_ENV
    body = json.dumps({"model": model, "messages": HELLO})
    return (f'curl -sS "{api_base(url)}/chat/completions" \\\n'
            f'  -H "Authorization: Bearer {bearer}" \\\n'
            f'  -H "Content-Type: application/json" \\\n'
            f"  -d {_shell_single_quoted(body)}")


def python_snippet(url: str, model: str, token: str | None) -> str:
    key = json.dumps(token) if token else f'os.environ["{TOKEN_ENV}"]'
    lines = ["import os", ""] if not token else []
    lines += ["from openai import OpenAI", "",
              f"client = OpenAI(base_url={json.dumps(api_base(url))}, api_key={key})",
              f"reply = client.chat.completions.create(model={json.dumps(model)}, messages={json.dumps(HELLO)})",
              "print(reply.choices[0].message.content)"]
    return "\n".join(lines)


def opencode_snippet(url: str, served: Sequence[ServedModel], token: str | None) -> tuple[str | None, str | None]:
    """The opencode.json text, or None and why not (no model known for this endpoint). `served`: the models
    of its client facts, each with its context (a gateway's: every pool's)."""
    if not served:
        return None, "This endpoint's client facts are not known, so no opencode.json can be written for it."
    try:
        # The provider adds /v1 itself: give it the URL without.
        base = api_base(url).removesuffix("/v1")
        target = served_target(base, None, served, api_key=token or "{env:" + TOKEN_ENV + "}", label="Berth")
        return json.dumps(opencode_config({"berth": target}), indent=2), None
    except BerthError as error:
        return None, str(error)


def snippets(url: str, model: str | None, served: Sequence[ServedModel], token: str | None) -> Snippets:
    shown_model = model or "MODEL_ID"
    opencode, note = opencode_snippet(url, served, token)
    return Snippets(curl=curl_snippet(url, shown_model, token), python=python_snippet(url, shown_model, token),
                    opencode=opencode, opencode_note=note)
