"""Kubernetes manifests checked offline, with no API server.

A rendered PyTorchJob is held to the Kubeflow training SDK's generated models of kubeflow.org/v1 (every field
name and type) and each replica's pod to kubernetes-validate's JSON schemas of Kubernetes (strict: an unknown
field fails). Both packages are pinned in requirements-launch.txt.
"""

from __future__ import annotations

import re

KUBERNETES_SCHEMA_VERSION = "1.30.0"


def _api_model(name: str) -> type:
    import kubernetes.client.models as k8s_models
    from kubeflow.training import models as kf_models

    return getattr(kf_models, name, None) or getattr(k8s_models, name)


def api_model_problems(value: object, type_name: str, path: str = "$") -> list[str]:
    """Where `value` leaves the generated API model `type_name`: unknown fields and wrong types, by path."""
    if type_name.startswith("list["):
        if not isinstance(value, list):
            return [f"{path}: expected a list"]
        return [
            p
            for i, item in enumerate(value)
            for p in api_model_problems(item, type_name[5:-1], f"{path}[{i}]")
        ]
    if type_name.startswith("dict("):
        inner = re.match(r"dict\(str, (.+)\)", type_name).group(1)
        if not isinstance(value, dict):
            return [f"{path}: expected a mapping"]
        return [p for key, item in value.items() for p in api_model_problems(item, inner, f"{path}.{key}")]
    if type_name in ("str", "int", "bool", "float", "object", "datetime"):
        expected = {"str": str, "int": int, "bool": bool, "float": (int, float)}.get(type_name, object)
        return [] if isinstance(value, expected) else [f"{path}: expected {type_name}, got {value!r}"]
    model = _api_model(type_name)
    if not isinstance(value, dict):
        return [f"{path}: expected a {type_name} mapping"]
    by_json = {json_key: attr for attr, json_key in model.attribute_map.items()}
    found = [f"{path}: {type_name} has no field {key!r}" for key in sorted(set(value) - set(by_json))]
    for key, item in value.items():
        if key in by_json:
            found += api_model_problems(item, model.openapi_types[by_json[key]], f"{path}.{key}")
    return found


def pytorchjob_problems(manifest: dict) -> list[str]:
    """Every reason the Kubeflow API models or Kubernetes' pod schema would refuse this PyTorchJob."""
    import kubernetes_validate

    found = api_model_problems(manifest, "KubeflowOrgV1PyTorchJob")
    for role, replica in (manifest.get("spec", {}).get("pytorchReplicaSpecs") or {}).items():
        template = replica.get("template") or {}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "x", **(template.get("metadata") or {})},
            "spec": template.get("spec"),
        }
        try:
            kubernetes_validate.validate(pod, KUBERNETES_SCHEMA_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            found.append(f"{role} pod: {error.message}")
    return found
