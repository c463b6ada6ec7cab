"""Apicurio Registry (Confluent-compatible API), storing its schemas in PostgreSQL; healthy
once /subjects answers."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from mcq.config import LOOPBACK
from mcq.stack.exceptions import MissingRuntime
from mcq.stack.services.base import JvmService, NotReady

if TYPE_CHECKING:
    pass


class Registry(JvmService):
    """Apicurio Registry 3 (Confluent-compatible ``ccompat`` API), stored in PostgreSQL."""

    name = "registry"
    depends_on = ("postgres",)
    heap = "registry_heap"
    main_class = ""

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.settings.stack.ports.registry,)

    @property
    def address(self) -> str:
        return f"http://{LOOPBACK}:{self.settings.stack.ports.registry}/apis/ccompat/v7"

    @property
    def libs(self) -> Path:
        return self.settings.stack.jvm_cache / "apicurio"

    def runner(self) -> Path:
        jars = [*sorted(self.libs.glob("apicurio-registry-app-*-runner.jar")), *self.libs.glob("quarkus-run.jar")]
        if not jars:
            raise MissingRuntime(
                self.name, f"no Apicurio runner jar in {self.libs}; run `make install`", self.handle.log_file
            )
        return jars[0]

    def argv(self) -> list[str]:
        return [self.settings.stack.java, *self.jvm_flags(), "-jar", str(self.runner())]

    def env(self) -> dict[str, str]:
        env = super().env()
        db = self.settings.source
        env.update(
            {
                "QUARKUS_HTTP_HOST": LOOPBACK,
                "QUARKUS_HTTP_PORT": str(self.settings.stack.ports.registry),
                "QUARKUS_LOG_CONSOLE_COLOR": "false",
                "APICURIO_STORAGE_KIND": "sql",
                "APICURIO_STORAGE_SQL_KIND": "postgresql",
                "APICURIO_DATASOURCE_URL": f"jdbc:postgresql://{LOOPBACK}:{self.settings.stack.ports.postgres}/mcq_registry",
                "APICURIO_DATASOURCE_USERNAME": db.user,
                "APICURIO_DATASOURCE_PASSWORD": db.password.get_secret_value(),
            }
        )
        return env

    def check(self) -> None:
        try:
            resp = httpx.get(f"{self.address}/subjects", timeout=5)
        except httpx.HTTPError as exc:
            raise NotReady(f"GET /subjects: {exc}") from None
        if resp.status_code != 200:
            raise NotReady(f"GET /subjects answered {resp.status_code}")
