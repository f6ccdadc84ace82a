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

    def response(self) -> JSONResponse:
        error = {"message": self.message, "type": self.error_type, "param": self.param, "code": self.status}
        return JSONResponse({"error": error}, status_code=self.status)


async def api_error_response(request: Request, error: Exception) -> Response:
    """Starlette's exception handler for ApiError."""
    assert isinstance(error, ApiError)
    return error.response()
