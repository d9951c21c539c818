"""Validates Kubernetes manifests against the Kubernetes API schemas, offline.

Every resource of every file given (a `kind: List` is checked item by item) is validated
with kubernetes-validate (PyPI: the API's JSON schemas for each Kubernetes version, bundled)
in strict mode, so that an unknown field is an error too. A custom resource has no schema
there: the ones the manifests use are validated with the schema their CRD publishes, as the
npm package @kubernetes-models/prometheus-operator ships it (tests/clients/crd_validate.mjs).
Any other kind is an error: nothing is waved through.

Usage: k8s_validate.py KUBERNETES_VERSION FILE...   (exit 0: all valid; 1: each problem printed)
"""
import json
import os
import subprocess
import sys

import kubernetes_validate
import yaml

# Custom resources and the CRD package that validates them.
CRDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}


def resources(path):
    with open(path) as f:
        for doc in yaml.safe_load_all(f):
            if not doc:
                continue
            if doc.get("kind") == "List":
                yield from doc.get("items") or []
            else:
                yield doc


def main():
    version, files = sys.argv[1], sys.argv[2:]
    problems, custom = [], []
    checked = 0
    for path in files:
        for r in resources(path):
            name = "%s %s/%s" % (path, r.get("kind"), (r.get("metadata") or {}).get("name"))
            if (r.get("apiVersion"), r.get("kind")) in CRDS:
                custom.append((name, r))
                continue
            try:
                kubernetes_validate.validate(r, version, strict=True)
                checked += 1
            except kubernetes_validate.ValidationError as e:
                where = ".".join(str(p) for p in e.path)
                problems.append("%s: %s: %s" % (name, where, e.message))
            except kubernetes_validate.SchemaNotFoundError:
                problems.append("%s: no schema for %s %s" % (name, r.get("apiVersion"), r.get("kind")))
    if custom:
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crd_validate.mjs")
        out = subprocess.run(
            ["node", script],
            input=json.dumps([{"name": n, "resource": r} for n, r in custom]),
            capture_output=True,
            text=True,
            cwd=os.path.dirname(script),
        )
        if out.returncode != 0:
            problems.extend(l for l in (out.stdout + out.stderr).splitlines() if l.strip())
        else:
            checked += len(custom)
    for p in problems:
        print("INVALID " + p)
    print("checked %d resource(s) against Kubernetes %s" % (checked, version))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
