"""The Helm chart ``helm/mcq``, rendered with its default values and with values generated
from ``examples/campus.yaml`` by ``mcq helm values``: what a campus installs next to its
existing Kafka, Connect and schema registry. Expected listeners come from reading the
registry file here, not from mcq's code."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from mcq.cli import main
from tests.deploy.conftest import CAMPUS, CHART, K8S_VERSION, Render, run_helm
from tests.support.chart import AD_TARGET, OPERATOR_VALUES, write_values
from tests.unit.entity_registry import SHOP

SECRET = "s3cr3t-pa55word-never-rendered"
CUSTOM_KINDS = {
    "KafkaConnector",
    "KafkaTopic",
    "KafkaUser",
    "PrometheusRule",
    "ScaledObject",
    "ServiceMonitor",
    "SparkApplication",
    "TriggerAuthentication",
}  # CRDs: not in the API schemas


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``mcq helm values examples/campus.yaml --strimzi``, run with a source password in the
    environment (it must end up as a reference, never as its value)."""
    out = tmp_path_factory.mktemp("values") / "values-registry.yaml"
    result = CliRunner().invoke(
        main,
        ["helm", "values", str(CAMPUS), "--strimzi"],
        env={"MCQ_SOURCE__PASSWORD": SECRET, "MCQ_SOURCE__HOST": "pg.campus.example"},
    )
    assert result.exit_code == 0, result.output
    out.write_text(result.output)
    return out


@pytest.fixture(scope="module")
def mine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An operator's own values (tests/support/chart.py)."""
    return write_values(tmp_path_factory.mktemp("values") / "my-values.yaml", OPERATOR_VALUES)


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Only the named target the campus registry's ADSI writes to (the chart needs it)."""
    return write_values(tmp_path_factory.mktemp("values") / "targets.yaml", {"targets": AD_TARGET})


def _registry_listeners() -> dict[str, str]:
    return {
        entry["name"]: entry.get("schedule", "realtime") for entry in yaml.safe_load(CAMPUS.read_text())["listeners"]
    }


def _of(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def _pod_specs(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    specs = []
    for d in docs:
        spec = d.get("spec", {})
        if d["kind"] in ("Deployment", "Job"):
            specs.append((f"{d['kind']}/{d['metadata']['name']}", spec["template"]["spec"]))
        elif d["kind"] == "CronJob":
            specs.append((f"CronJob/{d['metadata']['name']}", spec["jobTemplate"]["spec"]["template"]["spec"]))
    return specs


def test_helm_lint_passes_with_the_default_and_the_generated_values(helm: Path, generated: Path, mine: Path) -> None:
    for args in ([], ["-f", str(generated), "-f", str(mine)]):
        done = run_helm(helm, "lint", "--strict", str(CHART), *args)
        assert done.returncode == 0, done.stdout + done.stderr


def test_every_rendered_manifest_validates_against_the_kubernetes_api(
    render: Render, generated: Path, mine: Path
) -> None:
    for docs in (render(), render(generated, mine), render(generated, mine, sets=("capture.mode=rest",))):
        checked = 0
        for doc in docs:
            if doc["kind"] in CUSTOM_KINDS:
                continue
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
            checked += 1
        assert checked >= 3


def test_each_realtime_listener_is_a_deployment_and_each_scheduled_one_a_cronjob_on_its_schedule(
    render: Render, generated: Path, mine: Path
) -> None:
    docs = render(generated, mine)
    expected = _registry_listeners()
    assert set(expected.values()) - {"realtime"}, "the campus registry has scheduled listeners"

    def listener_of(doc: dict[str, Any]) -> str:
        return str(doc["metadata"]["labels"]["mcq.example/listener"])

    deployments = {
        listener_of(d): d for d in _of(docs, "Deployment") if "mcq.example/listener" in d["metadata"]["labels"]
    }
    cronjobs = {listener_of(d): d for d in _of(docs, "CronJob") if "mcq.example/listener" in d["metadata"]["labels"]}
    assert set(deployments) == {n for n, s in expected.items() if s == "realtime"}
    assert {n: c["spec"]["schedule"] for n, c in cronjobs.items()} == {
        n: s for n, s in expected.items() if s != "realtime"
    }
    for name, cron in cronjobs.items():
        assert cron["spec"]["concurrencyPolicy"] == "Forbid"
        assert cron["spec"]["startingDeadlineSeconds"] > 0
        job = cron["spec"]["jobTemplate"]["spec"]
        assert job["activeDeadlineSeconds"] > 0
        [container] = job["template"]["spec"]["containers"]
        assert container["args"][:3] == ["listen", name, "--until-caught-up"]
    assert cronjobs["Insite"]["spec"]["suspend"] is True
    for name, deployment in deployments.items():
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        assert container["args"][:2] == ["listen", name]
    assert deployments["LDAP"]["spec"]["replicas"] == 2
    pdbs = [p["metadata"]["labels"]["mcq.example/listener"] for p in _of(docs, "PodDisruptionBudget")]
    assert pdbs == ["LDAP"], "a PodDisruptionBudget for each listener with more than one replica, no other"


def test_no_container_runs_as_root_or_may_gain_privileges(render: Render, generated: Path, mine: Path) -> None:
    specs = _pod_specs(render(generated, mine))
    assert len(specs) >= 8
    for where, spec in specs:
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0, where
        for container in spec.get("initContainers", []) + spec["containers"]:
            sc = container["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, (where, container["name"])
            assert sc["capabilities"]["drop"] == ["ALL"], (where, container["name"])
            assert sc["readOnlyRootFilesystem"] is True, (where, container["name"])
            assert sc.get("runAsUser", pod["runAsUser"]) != 0


def test_every_mcq_container_logs_json_lines_for_the_cluster_log_collector(
    render: Render, generated: Path, targets: Path
) -> None:
    checked = 0
    for where, spec in _pod_specs(render(generated, targets)):
        for container in spec.get("initContainers", []) + spec["containers"]:
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            if "MCQ_TOPIC_PREFIX" in env:  # an mcq process
                assert env.get("MCQ_LOG__FORMAT") == "json", (where, container["name"])
                checked += 1
    assert checked >= 5


def test_every_container_has_resources_and_every_mcq_service_probes(
    render: Render, generated: Path, mine: Path
) -> None:
    """Services (Deployments) have startup, liveness and readiness probes; a listener's
    scheduled run has startup and liveness probes (a wedged run is restarted); one-shot
    jobs (setup, status) are bounded by their activeDeadlineSeconds instead."""
    docs = render(generated, mine)
    for where, spec in _pod_specs(docs):
        for container in spec.get("initContainers", []) + spec["containers"]:
            assert container["resources"]["requests"], (where, container["name"])
            assert container["resources"]["limits"]["memory"], (where, container["name"])
        if where.startswith("Deployment/"):
            for container in spec["containers"]:
                assert {"startupProbe", "livenessProbe", "readinessProbe"} <= container.keys(), where
    for cron in _of(docs, "CronJob"):
        job = cron["spec"]["jobTemplate"]["spec"]
        if "mcq.example/listener" in cron["metadata"]["labels"]:
            assert {"startupProbe", "livenessProbe"} <= job["template"]["spec"]["containers"][0].keys()
        else:
            assert job["activeDeadlineSeconds"] > 0
    for job in _of(docs, "Job"):
        assert job["spec"]["activeDeadlineSeconds"] > 0


def test_no_secret_value_appears_and_every_password_comes_from_a_secret(
    render: Render, generated: Path, mine: Path
) -> None:
    assert SECRET not in generated.read_text()
    assert "${env:MCQ_SOURCE__PASSWORD}" in generated.read_text()
    docs = render(generated, mine)
    assert SECRET not in yaml.safe_dump_all(docs)
    assert not _of(docs, "Secret"), "the chart makes no Secret: it references the operator's"
    for where, spec in _pod_specs(docs):
        for container in spec.get("initContainers", []) + spec["containers"]:
            for env in container["env"]:
                if re.search("PASSWORD|SECRET|TOKEN|HASH", env["name"]):
                    assert "value" not in env and "secretKeyRef" in env["valueFrom"], (where, env)


def _secret_refs(spec: dict[str, Any]) -> set[str]:
    """Every Secret key a pod can read: secretKeyRef variables, envFrom Secrets, Secret volumes."""
    refs = set()
    for container in spec.get("initContainers", []) + spec["containers"]:
        for env in container.get("env", []):
            if ref := env.get("valueFrom", {}).get("secretKeyRef"):
                refs.add(f"{ref['name']}/{ref['key']}")
        for source in container.get("envFrom", []):
            if "secretRef" in source:
                refs.add(f"{source['secretRef']['name']}/*")
    for volume in spec.get("volumes", []):
        if "secret" in volume:
            refs.add(f"{volume['secret']['secretName']}/*")
    return refs


def test_each_pod_can_read_exactly_its_own_secrets(render: Render, generated: Path, mine: Path) -> None:
    """Least privilege, pod by pod: only the setup hook has the administrators' credentials;
    the normaliser (and the entities writer) and the console's read-only identity (the
    console, the status checks) their own Kafka principal; each listener its own principal
    and its one target's password, read here from the registry file."""
    ca, reader = "campus-cluster-ca-cert/*", "mcq-registry-reader/password"
    normaliser = {ca, reader, "mcq-normaliser/password"}
    console = {ca, reader, "mcq-console/password"}
    expected = {
        "Job/campus-setup": {ca, "mcq-kafka/password", "mcq-registry/password", "mcq-connect-rest/password",
                             "mcq-source/password"},
        "Deployment/campus-normalizer": normaliser,
        "Deployment/campus-entities": normaliser,
        "CronJob/campus-status": console,
        "Deployment/campus-status-exporter": console,
        "Deployment/campus-console": console | {"console-users/alice", "console-session/secret"},
    }  # fmt: skip
    target_secret = {"vendor": "mcq-vendor/password", "ldap": "mcq-ldap/bind-password", "ad": "mcq-ad/password"}
    for entry in yaml.safe_load(CAMPUS.read_text())["listeners"]:
        name, adapter = entry["name"], entry["adapter"]
        kind = "Deployment" if entry.get("schedule", "realtime") == "realtime" else "CronJob"
        own = {f"mcq-listener-{name.lower()}/password"}
        if name == "LDAP":  # its own identity from the operator's Secret (tests/support/chart.py)
            own = {"mcq-listener-ldap-own/password", "mcq-listener-ldap-own/username"}
        settings = adapter.get("settings", {})
        target = {"table": settings.get("database", "vendor"), "sql_import": settings.get("database", "vendor"),
                  "ldap": settings.get("target", "ldap")}.get(adapter["type"])  # fmt: skip
        expected[f"{kind}/campus-listener-{name.lower()}"] = {ca, reader, *own} | (
            {target_secret[target]} if target else set()
        )
    got = {where: _secret_refs(spec) for where, spec in _pod_specs(render(generated, mine))}
    assert got == expected


def test_a_listener_given_an_administrators_secret_is_refused(helm: Path, generated: Path, mine: Path) -> None:
    for override in (
        "listenerOverrides.Unity.kafkaCredentials.existingSecret=mcq-kafka",
        "listenerOverrides.Unity.secrets.MCQ_SECRET_X.existingSecret=mcq-connect-rest",
    ):
        done = run_helm(
            helm, "template", "campus", str(CHART), "-f", str(generated), "-f", str(mine), "--set", override
        )
        assert done.returncode != 0, override
        assert "listener Unity" in done.stderr and "administrator" in done.stderr, done.stderr
    for value in ({"env": [{"name": "MCQ_KAFKA__SASL_PASSWORD", "value": "x"}]},
                  {"envFrom": [{"secretRef": {"name": "mcq-kafka"}}]},
                  {"secrets": {"MCQ_KAFKA__SASL_PASSWORD": {"existingSecret": "s", "key": "k"}}}):  # fmt: skip
        extra = write_values(generated.parent / "extra.yaml", {"listenerOverrides": {"Unity": value}})
        done = run_helm(helm, "template", "campus", str(CHART), "-f", str(generated), "-f", str(mine), "-f", str(extra))
        assert done.returncode != 0, value
        assert "values don't meet the specifications of the schema" in done.stderr, done.stderr


def test_a_registry_secret_reference_needs_its_secret_in_the_values(helm: Path, tmp_path: Path, mine: Path) -> None:
    registry = yaml.safe_load(CAMPUS.read_text())
    applix = next(e for e in registry["listeners"] if e["name"] == "Applix")
    applix["adapter"]["settings"]["token"] = "${env:MCQ_SECRET_APPLIX_TOKEN}"
    file = write_values(tmp_path / "campus.yaml", registry)
    result = CliRunner().invoke(main, ["helm", "values", str(file)])
    assert result.exit_code == 0, result.output
    generated = tmp_path / "values-registry.yaml"
    generated.write_text(result.output)
    done = run_helm(helm, "template", "campus", str(CHART), "-f", str(generated), "-f", str(mine))
    assert done.returncode != 0
    assert "listenerOverrides.Applix.secrets.MCQ_SECRET_APPLIX_TOKEN" in done.stderr, done.stderr
    given = "listenerOverrides.Applix.secrets.MCQ_SECRET_APPLIX_TOKEN.existingSecret=applix-webhook"
    done = run_helm(helm, "template", "campus", str(CHART), "-f", str(generated), "-f", str(mine), "--set", given)
    assert done.returncode == 0, done.stderr
    [cron] = [d for d in yaml.safe_load_all(done.stdout) if d and d["metadata"]["name"] == "campus-listener-applix"]
    env = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "MCQ_SECRET_APPLIX_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "applix-webhook", "key": "password"}}} in env  # fmt: skip


@pytest.mark.parametrize(
    ("setting", "named"),
    [("normaliser.enabled=false", "'normaliser' not allowed"),
     ("listenerDefaults.replica=2", "'replica' not allowed"),
     ("settings.kafka.bootstrapServer=x:9092", "'bootstrapServer' not allowed"),
     ("credentials.sourcePasword.existingSecret=s", "'sourcePasword' not allowed"),
     ("extraEnv.MCQ_SOURCE__PASSWORD=plain", "MCQ_SOURCE__PASSWORD")],
)  # fmt: skip
def test_a_values_file_with_an_unknown_key_is_refused_by_the_schema(
    helm: Path, tmp_path: Path, setting: str, named: str
) -> None:
    key, value = setting.split("=")
    tree: dict[str, Any] = {}
    node = tree
    *parents, leaf = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(tree))
    done = run_helm(helm, "template", "campus", str(CHART), "-f", str(values))
    assert done.returncode != 0, done.stdout[:500]
    assert "values don't meet the specifications of the schema" in done.stderr, done.stderr
    assert named in done.stderr, done.stderr


def test_the_setup_hook_applies_registry_topics_schemas_then_capture(
    render: Render, generated: Path, targets: Path
) -> None:
    docs = render(generated, targets, sets=("capture.mode=rest",))
    [job] = _of(docs, "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    spec = job["spec"]["template"]["spec"]
    steps = [c["args"] for c in spec["initContainers"] + spec["containers"]]
    registry = "/etc/mcq/registry/registry.yaml"
    assert steps == [
        ["registry", "apply", registry],
        ["topics", "apply", "--registry", registry],
        ["schemas", "apply", "--registry", registry],
        ["connect", "apply", "--registry", registry],
    ]
    [configmap] = [d for d in _of(docs, "ConfigMap") if d["metadata"]["name"].endswith("-registry")]
    assert configmap["data"]["registry.yaml"].strip() == CAMPUS.read_text().strip()
    assert int(configmap["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
        job["metadata"]["annotations"]["helm.sh/hook-weight"]
    )


def test_strimzi_mode_makes_a_kafkaconnector_per_source_and_the_hook_only_prepares_the_source(
    render: Render, generated: Path, targets: Path
) -> None:
    docs = render(generated, targets)
    sources = yaml.safe_load(CAMPUS.read_text())["sources"]
    connectors = _of(docs, "KafkaConnector")
    assert [c["spec"]["config"]["slot.name"] for c in connectors] == [s["slot"] for s in sources]
    for connector in connectors:
        assert connector["metadata"]["labels"]["strimzi.io/cluster"] == "connect"
        assert connector["spec"]["config"]["database.hostname"] == "pg.campus.example"
    [job] = _of(docs, "Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["args"][:3] == ["connect", "apply", "--prepare-only"]


def _normalizer(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [deployment] = [
        d for d in _of(docs, "Deployment") if d["metadata"]["labels"]["app.kubernetes.io/component"] == "normalizer"
    ]
    kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)
    return deployment


def test_the_normaliser_is_one_pod_a_rolling_update_hands_over_on_a_kept_checkpoint_claim(render: Render) -> None:
    docs = render()
    deployment = _normalizer(docs)
    assert deployment["spec"]["replicas"] == 1
    # the new pod starts beside the old one, which stops only once the new one is ready
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}
    }  # fmt: skip
    [claim] = _of(docs, "PersistentVolumeClaim")
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    pod = deployment["spec"]["template"]["spec"]
    # a ReadWriteOnce checkpoint: the new pod runs on the old one's node
    [term] = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= pod_labels(deployment).items()
    container = pod["containers"][0]
    assert container["args"][:2] == ["streams", "normalize"]
    assert container["args"][-2:] == ["--after-handover", "idle"]  # else its Deployment would restart it
    assert {"name": "checkpoint", "mountPath": "/var/lib/mcq-checkpoint"} in container["volumeMounts"]

    shared = _normalizer(render(sets=("normalizer.checkpoint.accessMode=ReadWriteMany",)))
    assert "affinity" not in shared["spec"]["template"]["spec"]  # any node


def test_a_standby_is_a_second_deployment_beside_the_normaliser_on_its_checkpoint(render: Render) -> None:
    docs = render(sets=("normalizer.standby=true",))
    normalizer = _normalizer(docs)
    [standby] = [
        d
        for d in _of(docs, "Deployment")
        if d["metadata"]["labels"]["app.kubernetes.io/component"] == "normalizer-standby"
    ]
    kubernetes_validate.validate(standby, K8S_VERSION, strict=True)
    assert standby["metadata"]["name"] == f"{normalizer['metadata']['name']}-standby"
    assert not pod_labels(standby).items() <= pod_labels(normalizer).items()  # neither selects the other's pods
    assert not standby["spec"]["selector"]["matchLabels"].items() <= pod_labels(normalizer).items()
    args = standby["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["streams", "normalize"] and args[-1] == "--standby" and "--after-handover" not in args
    assert normalizer["spec"]["template"]["spec"]["containers"][0]["args"][-2:] == ["--after-handover", "idle"]
    volumes = [
        v["persistentVolumeClaim"] for v in standby["spec"]["template"]["spec"]["volumes"] if v["name"] == "checkpoint"
    ]
    [claim] = _of(docs, "PersistentVolumeClaim")
    assert volumes == [{"claimName": claim["metadata"]["name"]}]  # the one checkpoint
    # a ReadWriteOnce checkpoint: on the normaliser's node
    [term] = standby["spec"]["template"]["spec"]["affinity"]["podAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["labelSelector"]["matchLabels"].items() <= pod_labels(normalizer).items()
    assert len([d for d in _of(render(), "Deployment") if "standby" in d["metadata"]["name"]]) == 0  # off by default
    micro = render(sets=("normalizer.standby=true", "normalizer.mode=microbatch"))
    assert not [d for d in _of(micro, "Deployment") if "standby" in d["metadata"]["name"]]  # real time only


def test_a_recreate_update_stops_the_old_normaliser_pod_first(render: Render) -> None:
    deployment = _normalizer(render(sets=("normalizer.update=recreate",)))
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    pod = deployment["spec"]["template"]["spec"]
    assert "affinity" not in pod and "--after-handover" not in pod["containers"][0]["args"]


def pod_labels(deployment: dict[str, Any]) -> dict[str, str]:
    return dict(deployment["spec"]["template"]["metadata"]["labels"])


def test_a_registry_with_entities_gets_one_recreated_entities_writer(render: Render, tmp_path: Path) -> None:
    registry = tmp_path / "shop.yaml"
    registry.write_text(SHOP.format(src="shop", schema="shop", slot="mcq_shop", listeners=""))
    result = CliRunner().invoke(main, ["helm", "values", str(registry)])
    assert result.exit_code == 0, result.output
    values = tmp_path / "values.yaml"
    values.write_text(result.output)
    assert yaml.safe_load(result.output)["entities"] == {"enabled": True}
    docs = render(values)
    [deployment] = [
        d for d in _of(docs, "Deployment") if d["metadata"]["labels"]["app.kubernetes.io/component"] == "entities"
    ]
    kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:2] == ["entities", "run"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    # the campus has no entity: nothing writes entity topics there
    assert not [d for d in _of(render(), "Deployment") if "entities" in d["metadata"]["name"]]


def test_the_normaliser_as_a_sparkapplication_needs_a_shared_checkpoint_claim(helm: Path, render: Render) -> None:
    refused = run_helm(helm, "template", "campus", str(CHART), "--set", "normalizer.kind=sparkApplication")
    assert refused.returncode != 0 and "ReadWriteMany" in refused.stderr, refused.stderr
    docs = render(sets=("normalizer.kind=sparkApplication", "normalizer.checkpoint.existingClaim=mcq-checkpoint"))
    [app] = _of(docs, "SparkApplication")
    assert app["spec"]["mainApplicationFile"] == "local:///opt/mcq/submit.py"
    assert not [
        d for d in _of(docs, "Deployment") if d["metadata"]["labels"]["app.kubernetes.io/component"] == "normalizer"
    ]


def test_an_image_digest_pins_every_container(render: Render, generated: Path, targets: Path) -> None:
    digest = "sha256:" + "ab" * 32
    docs = render(generated, targets, sets=(f"image.digest={digest}",))
    images = {c["image"] for _, spec in _pod_specs(docs) for c in spec.get("initContainers", []) + spec["containers"]}
    assert images == {f"registry.example/mcq@{digest}"}


def test_an_override_for_a_listener_the_registry_does_not_have_is_refused(helm: Path, generated: Path) -> None:
    done = run_helm(
        helm,
        "template",
        "campus",
        str(CHART),
        "-f",
        str(generated),
        "--set",
        "listenerOverrides.LDPA.replicas=2",
    )
    assert done.returncode != 0
    assert "listenerOverrides.LDPA: no listener of that name" in done.stderr and "LDAP" in done.stderr, done.stderr


def test_every_mounted_volume_and_probed_port_is_declared_in_its_pod(
    render: Render, generated: Path, mine: Path
) -> None:
    for docs in (render(), render(generated, mine)):
        for where, spec in _pod_specs(docs):
            volumes = {v["name"] for v in spec.get("volumes", [])}
            for container in spec.get("initContainers", []) + spec["containers"]:
                mounts = {m["name"] for m in container.get("volumeMounts", [])}
                assert mounts <= volumes, (where, container["name"], mounts - volumes)
                ports = {p["name"] for p in container.get("ports", [])}
                for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                    if probe in container:
                        assert container[probe]["httpGet"]["port"] in ports, (where, probe)
