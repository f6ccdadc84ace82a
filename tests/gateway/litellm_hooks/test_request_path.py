"""The per-request work set aside in LiteLLM's worker: no access log line, no failing import retried, one SDK client
(which keeps no cookie and follows no redirect: every caller shares it)."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path
from typing import Final

import pytest

REPO_ROOT: Final = Path(__file__).resolve().parents[3]
LITELLM_PYTHON: Final = REPO_ROOT / ".venv-litellm" / "bin" / "python"

# The module imports litellm: it runs in LiteLLM's own interpreter, as it does in the proxy.
SCRIPT: Final = textwrap.dedent(
    """
    import asyncio, logging, sys
    import httpx, litellm
    from gateway.litellm_hooks import request_path

    async def main():
        assert not request_path.settle_failing_import("json")  # importable: left alone
        assert sys.modules["json"] is not None
        missing = "gateway.litellm_hooks.no_such_module_here"
        assert request_path.settle_failing_import(missing)
        try:
            __import__(missing)
        except ModuleNotFoundError:
            pass
        else:
            raise AssertionError("a settled import must keep failing")

        task = request_path.start()
        assert logging.getLogger("uvicorn.access").getEffectiveLevel() > logging.INFO
        client = litellm.aclient_session
        assert isinstance(client, httpx.AsyncClient) and not client.is_closed
        # Shared by every caller: it keeps no cookie a copy sets and follows no redirect.
        answer = httpx.Response(200, headers={"set-cookie": "seen=alice; Path=/"},
                                request=httpx.Request("POST", "http://127.0.0.1:9/v1/completions"))
        client.cookies.extract_cookies(answer)
        assert len(client.cookies.jar) == 0 and not client.follow_redirects
        await asyncio.sleep(0)
        task.cancel()  # what the worker's loop does to its tasks at shutdown
        await asyncio.gather(task, return_exceptions=True)
        assert client.is_closed and litellm.aclient_session is None
        print("ok", *[name for name in request_path.PER_REQUEST_IMPORTS if sys.modules.get(name, 0) is None])

    asyncio.run(main())
    """
)


@pytest.mark.skipif(not LITELLM_PYTHON.exists(), reason="no .venv-litellm")
def test_start_sets_the_per_request_work_aside_and_closes_its_client() -> None:
    ran: Final = subprocess.run([str(LITELLM_PYTHON), "-c", SCRIPT], cwd=REPO_ROOT, capture_output=True, text=True,
                                timeout=120, check=False)
    assert ran.returncode == 0, ran.stderr[-3000:]
    words: Final = ran.stdout.splitlines()[-1].split()  # LiteLLM logs to stdout too
    assert words[0] == "ok"
    # .venv-litellm has no opentelemetry SDK: LiteLLM's per-request OTel import is settled as failing.
    assert "litellm.integrations.otel.logger" in words[1:]
