"""Unary calls for the suite: Connect protocol over HTTP/1.1 with binary proto or JSON.

Deliberately independent of the SDK client so server checks test the server,
not our client. Errors come back as :class:`conveyor_sdk.errors.ConveyorError`
built from the Connect error body (``{"code": ..., "message": ...}``).
"""

from __future__ import annotations

import json
import ssl
from typing import Any, TypeVar

import httpx
from google.protobuf.message import Message

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.errors import Code, ConveyorError, Unavailable, error_for_code

__all__ = ["UNSET", "ApiClient"]

M = TypeVar("M", bound=Message)

UNSET: Any = object()  # "use the client's configured token"

TASK = "/conveyor.v1.TaskService/"
ADMIN = "/conveyor.v1.AdminService/"


class ApiClient:
    """Async Connect unary client bound to one server URL and optional token."""

    def __init__(
        self, base_url: str, token: str | None = None, *, timeout: float = 15.0, ca_file: str | None = None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca_file) if ca_file else True
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, verify=verify)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    def _headers(self, content_type: str, token: Any) -> dict[str, str]:
        headers = {"Content-Type": content_type, "Connect-Protocol-Version": "1"}
        tok = self.token if token is UNSET else token
        if tok is not None:
            headers["Authorization"] = f"Bearer {tok}"
        return headers

    async def _post(self, path: str, body: bytes, content_type: str, token: Any) -> httpx.Response:
        try:
            return await self._http.post(path, content=body, headers=self._headers(content_type, token))
        except httpx.HTTPError as exc:
            raise Unavailable(f"{path}: {type(exc).__name__}: {exc}") from None

    async def call(self, path: str, request: Message, response_type: type[M], *, token: Any = UNSET) -> M:
        """Binary-proto unary call; raises ConveyorError for a non-200 answer."""
        resp = await self._post(path, request.SerializeToString(), "application/proto", token)
        if resp.status_code != 200:
            raise _admin_na(path, _error(resp))
        out = response_type()
        out.ParseFromString(resp.content)
        return out

    async def call_json(self, path: str, body: dict[str, Any], *, token: Any = UNSET) -> dict[str, Any]:
        """Connect JSON unary call; returns the decoded JSON object or raises ConveyorError."""
        resp = await self._post(path, json.dumps(body).encode(), "application/json", token)
        if resp.status_code != 200:
            raise _admin_na(path, _error(resp))
        data = json.loads(resp.content or b"{}")
        if not isinstance(data, dict):
            raise ConveyorError(f"{path}: JSON answer is not an object: {data!r}")
        return data

    # --- conveniences used by many checks -------------------------------------------------

    async def enqueue(self, *, token: Any = UNSET, **fields: Any) -> pb.TaskInfo:
        """Enqueue one task built from EnqueueRequest keyword fields; returns its TaskInfo."""
        resp = await self.call(TASK + "Enqueue", pb.EnqueueRequest(**fields), pb.EnqueueResponse, token=token)
        return resp.task

    async def get_task(self, task_id: str, *, token: Any = UNSET) -> pb.TaskInfo:
        """GetTask; raises NotFound for an unknown id."""
        req = pb.GetTaskRequest(id=task_id)
        resp = await self.call(TASK + "GetTask", req, pb.GetTaskResponse, token=token)
        return resp.task

    async def enqueue_batch(self, items: list[pb.EnqueueRequest]) -> pb.EnqueueBatchResponse:
        """EnqueueBatch with the given items."""
        req = pb.EnqueueBatchRequest(tasks=items)
        return await self.call(TASK + "EnqueueBatch", req, pb.EnqueueBatchResponse)

    async def enqueue_tx(self, items: list[pb.EnqueueRequest]) -> pb.EnqueueTxResponse:
        """EnqueueTx with the given items."""
        return await self.call(TASK + "EnqueueTx", pb.EnqueueTxRequest(tasks=items), pb.EnqueueTxResponse)

    async def cancel_task(self, task_id: str) -> None:
        """AdminService.CancelTask."""
        await self.call(ADMIN + "CancelTask", pb.CancelTaskRequest(id=task_id), pb.CancelTaskResponse)


def _admin_na(path: str, err: ConveyorError) -> Exception:
    """AdminService is optional surface (§7): an unimplemented admin RPC makes a check n/a."""
    if path.startswith(ADMIN) and err.code is Code.UNIMPLEMENTED:
        from conveyor_conformance.model import NotApplicable

        return NotApplicable(f"not applicable: the server does not implement {path}")
    return err


def _error(resp: httpx.Response) -> ConveyorError:
    try:
        body = json.loads(resp.content)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("code"), str):
        code = Code.from_connect(body["code"])
        return error_for_code(code, str(body.get("message", "")), details={"http_status": resp.status_code})
    code = Code.from_http_status(resp.status_code)
    text = resp.text[:200]
    return error_for_code(code, f"HTTP {resp.status_code}: {text}", details={"http_status": resp.status_code})
