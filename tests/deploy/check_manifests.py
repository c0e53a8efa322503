"""Checks one rendering of the deployment (helm template or kubectl kustomize).

Every object is validated against the Kubernetes OpenAPI schemas (strict: no
unknown field), then what schemas cannot say: the awaken container has the three
probes on the health routes, resources, a non-root read-only security context and
a pre-stop pause; the pods outlive the node's drain; selectors of the Service,
PodDisruptionBudget and NetworkPolicy match the pods; the HPA scales the
Deployment. Prints, as JSON, what the test needs to start the binary as the pod
would: its args, environment and config files.

usage: check_manifests.py RENDERED.yaml KUBERNETES_VERSION
"""

import json
import sys
import tomllib

import kubernetes_validate
import yaml

CRD_GROUPS = ("monitoring.coreos.com/",)


def fail(message):
    sys.exit(f"{sys.argv[1]}: {message}")


def validate(objects, version):
    for obj in objects:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            if not obj["apiVersion"].startswith(CRD_GROUPS):
                fail(f"{name}: no schema for {obj['apiVersion']}")
        except kubernetes_validate.ValidationError as error:
            fail(f"{name}: {error.message} at {list(error.path)}")


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_container(container, grace, drain):
    probes = {
        "startupProbe": "/health/ready",
        "readinessProbe": "/health/ready",
        "livenessProbe": "/health/live",
    }
    for probe, path in probes.items():
        got = container.get(probe, {}).get("httpGet", {}).get("path")
        if got != path:
            fail(f"{probe} must get {path}, has {got}")
    resources = container.get("resources", {})
    for need in ("cpu", "memory"):
        if need not in resources.get("requests", {}):
            fail(f"no {need} request")
    if "memory" not in resources.get("limits", {}):
        fail("no memory limit")
    security = container.get("securityContext", {})
    if not security.get("runAsNonRoot"):
        fail("the container may run as root")
    if not security.get("readOnlyRootFilesystem"):
        fail("the root file system is writable")
    if security.get("allowPrivilegeEscalation") is not False:
        fail("privilege escalation is allowed")
    if "ALL" not in security.get("capabilities", {}).get("drop", []):
        fail("capabilities are not all dropped")
    if "preStop" not in container.get("lifecycle", {}):
        fail("no preStop pause")
    if grace <= drain:
        fail(f"terminationGracePeriodSeconds {grace} does not outlast the drain ({drain} s)")


def main():
    path, version = sys.argv[1], sys.argv[2]
    with open(path) as file:
        objects = [obj for obj in yaml.safe_load_all(file) if obj]
    validate(objects, version)
    by_kind = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    deployments = by_kind.get("Deployment", [])
    if len(deployments) != 1:
        fail(f"one Deployment expected, found {len(deployments)}")
    deployment = deployments[0]
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    if not matches(deployment["spec"]["selector"]["matchLabels"], labels):
        fail("the Deployment's selector does not match its pods")
    spec = pod["spec"]
    if not spec.get("securityContext", {}).get("runAsNonRoot"):
        fail("the pod may run as root")
    containers = [c for c in spec["containers"] if c["name"] == "awaken"]
    if len(containers) != 1:
        fail("no awaken container")
    container = containers[0]

    config_maps = {cm["metadata"]["name"]: cm for cm in by_kind.get("ConfigMap", [])}
    mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
    files = {}
    secrets = {}
    for volume in spec.get("volumes", []):
        if "configMap" in volume:
            name = volume["configMap"]["name"]
            if name not in config_maps:
                fail(f"volume {volume['name']} names ConfigMap {name}, which is not rendered")
            for key, text in config_maps[name]["data"].items():
                files[f"{mounts[volume['name']]}/{key}"] = text
        elif "secret" in volume:
            secrets[volume["secret"]["secretName"]] = mounts[volume["name"]]
    config = {}
    for text in files.values():
        for section, table in tomllib.loads(text).items():
            if isinstance(table, dict):
                config.setdefault(section, {}).update(table)
            else:
                config[section] = table
    shutdown = config.get("server", {}).get("shutdown", {}).get("timeout_secs", 30)
    drain = shutdown + config.get("cluster", {}).get("drain_timeout_secs", 0)
    check_container(container, spec.get("terminationGracePeriodSeconds", 30), drain)
    replicas = deployment["spec"].get("replicas")
    if "cluster" not in config and replicas != 1:
        fail(f"a node without [cluster] must run alone, has {replicas} replicas")
    if "cluster" not in config and deployment["spec"].get("strategy", {}).get("type") != "Recreate":
        fail("a node without [cluster] must be replaced, not rolled (no fencing)")

    for service in by_kind.get("Service", []):
        if not matches(service["spec"]["selector"], labels):
            fail(f"Service {service['metadata']['name']} selects no awaken pod")
    for pdb in by_kind.get("PodDisruptionBudget", []):
        if not matches(pdb["spec"]["selector"]["matchLabels"], labels):
            fail("the PodDisruptionBudget selects no awaken pod")
    for policy in by_kind.get("NetworkPolicy", []):
        if not matches(policy["spec"]["podSelector"].get("matchLabels"), labels):
            fail("the NetworkPolicy selects no awaken pod")
    for hpa in by_kind.get("HorizontalPodAutoscaler", []):
        target = hpa["spec"]["scaleTargetRef"]
        if (target["kind"], target["name"]) != ("Deployment", deployment["metadata"]["name"]):
            fail("the HorizontalPodAutoscaler scales something else")

    json.dump(
        {
            "args": container.get("args", []),
            "env": container.get("env", []),
            "files": files,
            "secrets": secrets,
            "cluster": "cluster" in config,
            "kinds": sorted(by_kind),
        },
        sys.stdout,
    )


main()
