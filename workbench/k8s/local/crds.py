"""Our own minimal CustomResourceDefinitions for the job kinds `kinds` reads: Kubeflow's
PyTorchJob and TFJob (`kubeflow.org/v1`) and JobSet (`jobset.x-k8s.io/v1alpha2`).

The local control plane cannot fetch the upstream CRDs (no network, and their full OpenAPI
schemas run to thousands of lines), and the workbench needs only what the scheduler and the
local operator (`operator`) read: each is namespaced, has a `status` subresource (so status
writes never race spec patches), and keeps unknown fields in `spec` and `status`
(`x-kubernetes-preserve-unknown-fields`), with the few fields the workbench patches or
counts typed, so that a replica count that is not an integer is refused as upstream refuses it.

    install_crds(cluster.rest)   # idempotent; returns once each kind's path answers a list
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from ..kinds import CUSTOM_KINDS, JOBSET, OwnerKind

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
MANAGED_BY = {"app.kubernetes.io/managed-by": "workbench"}


def _loose(**properties) -> dict:
    """An object schema that keeps fields it does not name."""
    out: dict = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    if properties:
        out["properties"] = properties
    return out


_INT = {"type": "integer", "format": "int32", "minimum": 0}


def _kubeflow_spec(kind: OwnerKind) -> dict:
    replica = _loose(replicas=_INT, restartPolicy={
        "type": "string", "enum": ["Always", "OnFailure", "Never", "ExitCode"]},
        template=_loose())
    return _loose(**{
        kind.replica_specs: {"type": "object", "additionalProperties": replica},
        "elasticPolicy": _loose(minReplicas=_INT, maxReplicas=_INT),
        "runPolicy": _loose(cleanPodPolicy={"type": "string",
                                            "enum": ["None", "Running", "All"]})})


def _jobset_spec() -> dict:
    replicated = _loose(name={"type": "string"}, replicas=_INT, template=_loose())
    replicated["required"] = ["name", "template"]
    return _loose(replicatedJobs={"type": "array", "items": replicated})


def crd_manifest(kind: OwnerKind) -> dict:
    """The CustomResourceDefinition of `kind` (one of `kinds.CUSTOM_KINDS`)."""
    spec = _jobset_spec() if kind is JOBSET else _kubeflow_spec(kind)
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name(kind), "labels": dict(MANAGED_BY)},
        "spec": {
            "group": kind.group, "scope": "Namespaced",
            "names": {"kind": kind.kind, "listKind": f"{kind.kind}List",
                      "plural": kind.plural, "singular": kind.kind.lower()},
            "versions": [{
                "name": kind.version, "served": True, "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": spec, "status": _loose()}}},
                # what `kubectl get` shows: the latest condition, as upstream's columns do
                "additionalPrinterColumns": [
                    {"name": "State", "type": "string",
                     "jsonPath": ".status.conditions[-1:].type"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}],
            }],
        },
    }


def crd_name(kind: OwnerKind) -> str:
    return f"{kind.plural}.{kind.group}"


def create_crds(rest, kinds: Iterable[OwnerKind] = CUSTOM_KINDS) -> list[str]:
    """Create the CRDs of `kinds` (one already there is left as it is); returns the names of
    those created. Does not wait: see `wait_established`."""
    created = []
    for kind in kinds:
        try:
            rest.post(CRD_PATH, crd_manifest(kind))
            created.append(crd_name(kind))
        except Exception as e:
            if getattr(e, "status", None) != 409:  # 409 AlreadyExists: installed before
                raise
    return created


def served(rest, kind: OwnerKind) -> bool:
    """Whether `kind`'s CRD is Established and its resource path answers a list."""
    try:
        crd = rest.get(f"{CRD_PATH}/{crd_name(kind)}")
        conds = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
        if conds.get("Established") != "True":
            return False
        rest.get(kind.path(), limit=1)
    except Exception:  # noqa: BLE001 - not there yet (404) or the apiserver busy
        return False
    return True


def wait_established(rest, kinds: Iterable[OwnerKind] = CUSTOM_KINDS,
                     timeout: float = 30.0) -> None:
    """Return once every kind in `kinds` is served; TimeoutError naming the ones that are not."""
    waiting = list(kinds)
    deadline = time.monotonic() + timeout
    while True:
        waiting = [k for k in waiting if not served(rest, k)]
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"CRDs not established after {timeout:.0f} s: "
                               + ", ".join(crd_name(k) for k in waiting))
        time.sleep(0.05)


def install_crds(rest, kinds: Iterable[OwnerKind] = CUSTOM_KINDS,
                 timeout: float = 30.0) -> list[str]:
    """Create the CRDs of `kinds` (idempotent) and wait until each is served; returns the
    names of those this call created."""
    kinds = list(kinds)
    created = create_crds(rest, kinds)
    wait_established(rest, kinds, timeout)
    return created


__all__ = ["crd_manifest", "crd_name", "create_crds", "install_crds", "served",
           "wait_established"]
