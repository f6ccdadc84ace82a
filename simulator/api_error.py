"""ApiError: a failure the simulated server answers with vLLM's `{"error": {...}}` body."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response


class ApiError(Exception):
    """An error the API returns as vLLM's `{"error": {...}}` body."""

    def __init__(self, status: int, message: str, error_type: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.param = param

    @classmethod
    def bad_request(cls, message: str, param: str | None = None) -> ApiError:
        return cls(400, message, "BadRequestError", param)

    @classmethod
    def simulated_failure(cls) -> ApiError:
        return cls(500, "Simulated failure (--fail-share)", "InternalServerError")

    def response(self) -> JSONResponse:
        error = {"message": self.message, "type": self.error_type, "param": self.param, "code": self.status}
        return JSONResponse({"error": error}, status_code=self.status)


async def api_error_response(request: Request, error: Exception) -> Response:
    """Starlette's exception handler for ApiError."""
    assert isinstance(error, ApiError)
    return error.response()


class FailShare:
    """Which requests a `--fail-share` engine fails: request n fails when floor(n·share) steps up, so the
    failures are exactly the share, evenly spread, and the same on every run."""

    def __init__(self, share: float) -> None:
        self.share = share
        self.seen = 0

    def check(self) -> None:
        """Count one completion request; raise the simulated 500 when it is one to fail."""
        if self.share <= 0:
            return
        self.seen += 1
        if int(self.seen * self.share) > int((self.seen - 1) * self.share):
            raise ApiError.simulated_failure()
