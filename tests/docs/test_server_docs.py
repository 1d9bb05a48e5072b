"""docs/server-http.md: the reference server answers the webhook-worker RPCs with `unimplemented`."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest


@pytest.mark.parametrize(
    "method", ["conveyor.v1.AdminService/ListWebhookWorkers", "conveyor.v1.WebhookService/Heartbeat"]
)
def test_webhook_rpcs_are_unimplemented(url: str, method: str) -> None:
    """A Connect call to a webhook-worker RPC gets the error code `unimplemented`."""
    req = urllib.request.Request(
        f"{url}/{method}", data=b"{}", headers={"Content-Type": "application/json"}, method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    body = json.loads(err.value.read())
    err.value.close()
    assert body["code"] == "unimplemented"
