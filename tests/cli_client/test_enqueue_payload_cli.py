"""`conveyor enqueue`: --json bytes sent as given (or --normalize'd), --encrypt with keys from env or file."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from conveyor_cli.app import app
from conveyor_sdk.client import SyncClient
from conveyor_sdk.encryption import Key, Keyring

KEY = Key("cli-k1", bytes(range(200, 232)))
KEY_TEXT = f"{KEY.id}:{base64.b64encode(KEY.secret).decode()}"
DOC = '{"b": 1, "a": "<x>", "c": 1.50}'


def run(url: str, *args: str, env: dict[str, str] | None = None) -> Result:
    base = {"CONVEYOR_ADDR": url, "CONVEYOR_TOKEN": "", "CONVEYOR_ENCRYPTION_KEY": ""}
    return CliRunner().invoke(app, list(args), env={**base, **(env or {})})


def stored(url: str, result: Result) -> Any:
    assert result.exit_code == 0, result.stderr
    task_id = json.loads(result.stdout)["id"]
    with SyncClient(url) as client:
        return client.get_task(task_id)


def test_json_is_sent_byte_for_byte(url: str) -> None:
    """Valid JSON goes out exactly as typed: spacing, key order and number spelling kept."""
    info = stored(url, run(url, "enqueue", "raw", "--json", DOC, "-o", "json"))
    assert info.payload == DOC.encode() and info.content_type == "application/json"


def test_normalize_re_encodes(url: str) -> None:
    """--normalize sorts keys, compacts and escapes like Go."""
    info = stored(url, run(url, "enqueue", "raw", "--json", DOC, "--normalize", "-o", "json"))
    assert info.payload == b'{"a":"\\u003cx\\u003e","b":1,"c":1.5}'


def test_invalid_json_is_refused(url: str) -> None:
    """Bytes that do not parse are an error even though they would be sent as given."""
    result = run(url, "enqueue", "raw", "--json", "{nope")
    assert result.exit_code == 1 and "--json is not valid JSON" in result.stderr


@pytest.mark.parametrize("source", ["env", "file", "env-file"])
def test_encrypt_seals_with_keys_from_env_or_file(url: str, tmp_path: Path, source: str) -> None:
    """With keys configured the stored payload is ciphertext that opens to the exact bytes given."""
    keys = tmp_path / "keys"
    keys.write_text(KEY_TEXT + "\n")
    args: list[str] = ["enqueue", "sealed", "--json", DOC, "-o", "json"]
    env: dict[str, str] = {}
    if source == "env":
        env["CONVEYOR_ENCRYPTION_KEY"] = KEY_TEXT  # upstream's variable: sealing is on when it is set
    elif source == "file":
        args += ["--encrypt", "--key-file", str(keys)]
    else:
        env["CONVEYOR_ENCRYPTION_KEY_FILE"] = str(keys)
    info = stored(url, run(url, *args, env=env))
    assert info.payload != DOC.encode() and Keyring(KEY).decrypt(info.payload) == DOC.encode()


def test_no_encrypt_overrides_the_environment(url: str) -> None:
    """--no-encrypt sends plaintext even when a key is in the environment."""
    result = run(url, "enqueue", "p", "--json", "[]", "--no-encrypt", "-o", "json",
                 env={"CONVEYOR_ENCRYPTION_KEY": KEY_TEXT})  # fmt: skip
    assert stored(url, result).payload == b"[]"


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--encrypt"], {}, "--encrypt needs keys"),
        (["--encrypt"], {"CONVEYOR_ENCRYPTION_KEY": "k1:bm9wZQ=="}, "32 bytes"),
        (["--key-file", "/nonexistent/keys"], {}, "cannot read key file"),
        (["--meta", "conveyor.encryption=1"], {}, "reserved"),
    ],
)
def test_key_mistakes_are_one_line_errors(
    url: str, args: list[str], env: dict[str, str], message: str
) -> None:
    """Missing or bad keys and a forged marker fail with one error line and no secret echoed."""
    result = run(url, "enqueue", "t", "--json", "{}", *args, env=env)
    assert result.exit_code == 1 and message in result.stderr and "Traceback" not in result.stderr
    assert "bm9wZQ" not in result.stderr
