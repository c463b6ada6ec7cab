"""Secrets in a registry are references (${env:NAME}, ${file:PATH}), never values: the
registry is stored in a Kafka topic and shown by `mcq registry show`. A value in clear is
refused with file:line; a reference is resolved when the listener's adapter starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from consumers.table.settings import TableSettings
from consumers.webhook.settings import WebhookSettings
from mcq.registry import RegistryInvalid, load_registry
from mcq.secrets import SecretRefused, SecretUnresolved, resolve
from tests import PROJECT_ROOT

CAMPUS = PROJECT_ROOT / "examples" / "campus.yaml"


def _with_unity_settings(tmp_path: Path, settings: str) -> tuple[Path, int]:
    """The campus registry with Unity's adapter replaced by a webhook with SETTINGS; the line of SETTINGS."""
    lines = CAMPUS.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "- name: Unity")
    at = next(i for i in range(start, len(lines)) if lines[i].strip().startswith("adapter:"))
    lines[at] = f"    adapter: {{type: webhook, settings: {{url: 'https://unity.example/hook', {settings}}}}}"
    path = tmp_path / "registry.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path, at + 1


@pytest.mark.parametrize(
    ("settings", "key", "value"),
    [("bearer_token: abc123", "bearer_token", "abc123"),
     ("headers: {Authorization: 'Basic dXNlcjpwdw=='}", "headers.Authorization", "dXNlcjpwdw=="),
     ("dsn: 'host=db user=u password=pw'", "dsn", "password=pw"),
     ("dsn: 'postgresql://u:pw@db/x'", "dsn", ":pw@")],
)  # fmt: skip
def test_a_secret_in_clear_is_refused_with_file_line_and_the_setting(
    tmp_path: Path, settings: str, key: str, value: str
) -> None:
    path, line = _with_unity_settings(tmp_path, settings)
    with pytest.raises(RegistryInvalid) as caught:
        load_registry(path)
    [problem] = caught.value.problems
    assert problem.startswith(f"{path}:{line}: listeners[Unity].adapter.settings.{key}: "), problem
    assert "${env:MCQ_SECRET_NAME}" in problem and "Kafka topic" in problem, problem
    assert value not in problem, "the error must not print the secret"


@pytest.mark.parametrize(
    "settings",
    ["bearer_token: '${env:MCQ_SECRET_UNITY_TOKEN}'", "headers: {Authorization: '${file:/run/secrets/unity}'}",
     "dsn: 'host=db user=u sslmode=verify-full'", "dsn: '${env:MCQ_SECRET_UNITY_DSN}'", "timeout_s: 3"],
)  # fmt: skip
def test_references_and_settings_without_a_secret_are_accepted(tmp_path: Path, settings: str) -> None:
    path, _ = _with_unity_settings(tmp_path, settings)
    assert load_registry(path).listener("Unity") is not None


def test_a_reference_is_resolved_when_the_adapter_settings_are_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCQ_SECRET_UNITY_TOKEN", "tok-from-env")
    monkeypatch.setenv("MCQ_SECRETS_DIR", str(tmp_path))
    secret_file = tmp_path / "auth"
    secret_file.write_text("Basic from-file\n")
    hook = WebhookSettings.model_validate(
        {"url": "https://x.example/hook", "bearer_token": "${env:MCQ_SECRET_UNITY_TOKEN}",
         "headers": {"Authorization": f"${{file:{secret_file}}}", "X-Plain": "kept"}}
    )  # fmt: skip
    assert hook.bearer_token is not None and hook.bearer_token.get_secret_value() == "tok-from-env"
    assert hook.headers == {"Authorization": "Basic from-file", "X-Plain": "kept"}
    assert "tok-from-env" not in repr(hook) and "tok-from-env" not in str(hook.model_dump())


def test_an_unresolvable_reference_names_the_setting_and_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCQ_SECRET_NO_SUCH_DSN", raising=False)
    monkeypatch.setenv("MCQ_SECRETS_DIR", "/nonexistent")
    with pytest.raises(ValidationError) as caught:
        TableSettings.model_validate({"dsn": "${env:MCQ_SECRET_NO_SUCH_DSN}"})
    [error] = caught.value.errors()
    assert error["loc"] == ("dsn",) and "MCQ_SECRET_NO_SUCH_DSN is not set" in error["msg"]
    with pytest.raises(SecretUnresolved, match=r"listener X: \$\{file:/nonexistent/s\}: cannot read"):
        resolve("${file:/nonexistent/s}", "listener X")


def test_a_reference_to_the_process_own_credentials_or_any_other_variable_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MCQ_KAFKA__SASL_PASSWORD", "the-admin-password")
    for name in ("MCQ_KAFKA__SASL_PASSWORD", "HOME", "PGPASSWORD", "MCQ_SECRETX"):
        with pytest.raises(SecretRefused, match=rf"\$\{{env:{name}\}}: refused: only variables named MCQ_SECRET_\*"):
            resolve(f"${{env:{name}}}", "listener X")
    with pytest.raises(ValidationError) as caught:
        WebhookSettings.model_validate({"url": "https://x.example/", "bearer_token": "${env:MCQ_KAFKA__SASL_PASSWORD}"})
    assert "the-admin-password" not in str(caught.value) and "refused" in str(caught.value)


def test_a_file_outside_the_secrets_directory_is_refused_even_through_a_link_or_dot_dot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets, outside = tmp_path / "secrets", tmp_path / "home"
    secrets.mkdir()
    outside.mkdir()
    (outside / "key.pem").write_text("PRIVATE")
    (secrets / "hr").write_text("hr-password\n")
    (secrets / "link").symlink_to(outside / "key.pem")
    monkeypatch.setenv("MCQ_SECRETS_DIR", str(secrets))
    assert resolve(f"${{file:{secrets}/hr}}", "x").get_secret_value() == "hr-password"
    assert resolve("${file:hr}", "x").get_secret_value() == "hr-password"  # relative: in the secrets directory
    for ref in (f"{outside}/key.pem", "/etc/passwd", f"{secrets}/../home/key.pem", "link", "../home/key.pem"):
        with pytest.raises(SecretRefused, match="not inside a secrets directory"):
            resolve(f"${{file:{ref}}}", "x")


def test_a_registry_reference_that_can_never_resolve_is_refused_at_its_line(tmp_path: Path) -> None:
    path, line = _with_unity_settings(tmp_path, "bearer_token: '${env:MCQ_KAFKA__SASL_PASSWORD}'")
    with pytest.raises(RegistryInvalid) as caught:
        load_registry(path)
    [problem] = caught.value.problems
    assert problem.startswith(f"{path}:{line}: listeners[Unity].adapter.settings.bearer_token: "), problem
    assert "only variables named MCQ_SECRET_* may be referenced" in problem
