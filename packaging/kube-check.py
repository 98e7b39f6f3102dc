#!/usr/bin/env python3
"""Checks an install as `kubectl kustomize` renders it, for what a fresh cluster
would stop on: every Secret, ConfigMap, ServiceAccount, StorageClass,
PriorityClass and namespace (and a StatefulSet's Service, a binding's Role) that
an object names must be created by the install or be one a cluster has from the
start; pods must pass the Pod Security level their namespace enforces; and no
container may still name the placeholder image that the kustomization's
`images:` replaces.

  kubectl kustomize DIR | packaging/kube-check.py NAME

Prints one line per problem and exits 1 if there is any; prints what it checked
and exits 0 otherwise. Used by packaging/test.sh.
"""

import sys

import yaml

# What every cluster has before anything is applied.
DEFAULTS = {
    "Namespace": {(None, n) for n in ("default", "kube-system", "kube-public", "kube-node-lease")},
    "PriorityClass": {(None, "system-node-critical"), (None, "system-cluster-critical")},
    "ClusterRole": {(None, n) for n in ("cluster-admin", "admin", "edit", "view")},
}
# Per namespace, whatever it is: its default account and the API's CA bundle.
IN_EVERY_NAMESPACE = {("ServiceAccount", "default"), ("ConfigMap", "kube-root-ca.crt")}
CLUSTER_SCOPED = {
    "Namespace", "ClusterRole", "ClusterRoleBinding", "StorageClass", "PriorityClass", "CSIDriver",
    "PersistentVolume", "CustomResourceDefinition", "RuntimeClass", "IngressClass",
    "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "APIService",
}
# The image name every shoal container is written with; `images:` sets it.
PLACEHOLDER_IMAGE = "shoal"


def pod_spec(obj):
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind == "Pod":
        return spec
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        return (spec.get("template") or {}).get("spec")
    if kind == "CronJob":
        return (((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}).get("spec")
    return None


def containers(spec):
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(key) or []:
            yield c


def references(obj, ns):
    """(kind, namespace, name, why) of everything `obj` names."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if ns is not None:
        yield "Namespace", None, ns, "its namespace"
    pod = pod_spec(obj)
    if pod is not None:
        yield "ServiceAccount", ns, pod.get("serviceAccountName") or "default", "serviceAccountName"
        if pod.get("priorityClassName"):
            yield "PriorityClass", None, pod["priorityClassName"], "priorityClassName"
        for s in pod.get("imagePullSecrets") or []:
            yield "Secret", ns, s.get("name"), "imagePullSecrets"
        for v in pod.get("volumes") or []:
            if "secret" in v and not v["secret"].get("optional"):
                yield "Secret", ns, v["secret"].get("secretName"), "volume " + v.get("name", "")
            if "configMap" in v and not v["configMap"].get("optional"):
                yield "ConfigMap", ns, v["configMap"].get("name"), "volume " + v.get("name", "")
            for src in (v.get("projected") or {}).get("sources") or []:
                for k, ref in (("secret", "Secret"), ("configMap", "ConfigMap")):
                    if k in src and not src[k].get("optional"):
                        yield ref, ns, src[k].get("name"), "projected volume " + v.get("name", "")
        for c in containers(pod):
            for e in c.get("env") or []:
                vf = e.get("valueFrom") or {}
                for k, ref in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
                    if k in vf and not vf[k].get("optional"):
                        yield ref, ns, vf[k].get("name"), "env %s of container %s" % (e.get("name"), c.get("name"))
            for e in c.get("envFrom") or []:
                for k, ref in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
                    if k in e and not e[k].get("optional"):
                        yield ref, ns, e[k].get("name"), "envFrom of container " + str(c.get("name"))
    if kind == "StatefulSet":
        if spec.get("serviceName"):
            yield "Service", ns, spec["serviceName"], "serviceName"
        for t in spec.get("volumeClaimTemplates") or []:
            yield from storage_class(t.get("spec") or {}, "volumeClaimTemplate " + t["metadata"]["name"])
    if kind == "PersistentVolumeClaim":
        yield from storage_class(spec, "its claim")
    if kind in ("RoleBinding", "ClusterRoleBinding"):
        for s in obj.get("subjects") or []:
            if s.get("kind") == "ServiceAccount":
                yield "ServiceAccount", s.get("namespace") or ns, s.get("name"), "a subject"
        ref = obj.get("roleRef") or {}
        yield ref.get("kind"), ns if ref.get("kind") == "Role" else None, ref.get("name"), "roleRef"


def storage_class(spec, why):
    name = spec.get("storageClassName")
    if name is None:
        # The cluster's default class: a fresh cluster may have none.
        yield "StorageClass", None, "(the cluster's default)", why + " names no storageClassName"
    elif name != "":
        yield "StorageClass", None, name, why


def pod_security(obj, spec, level):
    """What keeps `spec` out of Pod Security `level` (baseline or restricted)."""
    if spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"):
        yield "shares a host namespace"
    psc = spec.get("securityContext") or {}
    for v in spec.get("volumes") or []:
        if "hostPath" in v:
            yield "volume %s is a hostPath" % v.get("name")
        elif level == "restricted" and not set(v) - {"name"} <= {
                "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                "projected", "secret"}:
            yield "volume %s is of a type restricted forbids" % v.get("name")
    for c in containers(spec):
        csc, who = c.get("securityContext") or {}, "container %s" % c.get("name")
        if csc.get("privileged"):
            yield who + " is privileged"
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                yield who + " takes a hostPort"
        added = set((csc.get("capabilities") or {}).get("add") or [])
        if level == "restricted":
            if added - {"NET_BIND_SERVICE"}:
                yield who + " adds capabilities %s" % sorted(added)
            if "ALL" not in ((csc.get("capabilities") or {}).get("drop") or []):
                yield who + " does not drop ALL capabilities"
            if csc.get("allowPrivilegeEscalation") is not False:
                yield who + " does not set allowPrivilegeEscalation: false"
            if not csc.get("runAsNonRoot", psc.get("runAsNonRoot")):
                yield who + " does not set runAsNonRoot"
            if csc.get("runAsUser", psc.get("runAsUser")) == 0:
                yield who + " runs as user 0"
            seccomp = (csc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
            if seccomp not in ("RuntimeDefault", "Localhost"):
                yield who + " has no RuntimeDefault seccomp profile"
        elif added - {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                      "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}:
            yield who + " adds capabilities %s" % sorted(added)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: kubectl kustomize DIR | kube-check.py NAME")
    name = sys.argv[1]
    try:
        objs = [o for o in yaml.safe_load_all(sys.stdin) if o]
    except yaml.YAMLError as e:
        sys.exit("%s: the rendering is not YAML: %s" % (name, e))
    if not objs:
        sys.exit("%s: the rendering holds no object" % name)

    created = {k: set(v) for k, v in DEFAULTS.items()}
    levels = {}
    for o in objs:
        kind, meta = o.get("kind"), o.get("metadata") or {}
        ns = None if kind in CLUSTER_SCOPED else meta.get("namespace", "default")
        created.setdefault(kind, set()).add((ns, meta.get("name")))
        if kind == "Namespace":
            levels[meta.get("name")] = (meta.get("labels") or {}).get("pod-security.kubernetes.io/enforce")

    problems, missing, refs, pods = [], {}, 0, 0
    for o in objs:
        kind, meta = o.get("kind"), o.get("metadata") or {}
        ns = None if kind in CLUSTER_SCOPED else meta.get("namespace", "default")
        what = "%s %s" % (kind, "/".join(x for x in (ns, meta.get("name")) if x))
        for rkind, rns, rname, why in references(o, ns):
            refs += 1
            if (rns, rname) in created.get(rkind, ()) or (rkind, rname) in IN_EVERY_NAMESPACE:
                continue
            missing.setdefault((rkind, rns, rname), []).append("%s (%s)" % (what, why))
        spec = pod_spec(o)
        if spec is None:
            continue
        pods += 1
        for c in containers(spec):
            if str(c.get("image", "")).split(":")[0] == PLACEHOLDER_IMAGE:
                problems.append("%s: container %s still names image %r: no `images:` set it" % (
                    what, c.get("name"), c.get("image")))
        level = levels.get(ns)
        if level in ("baseline", "restricted"):
            for why in pod_security(o, spec, level):
                problems.append("%s fails Pod Security %r of namespace %s: %s" % (what, level, ns, why))

    for (rkind, rns, rname), by in missing.items():
        problems.insert(0, "%s %s, which nothing creates, is named by %s" % (
            rkind, "/".join(x for x in (rns, rname) if x), "; ".join(by)))
    for p in problems:
        print("%s: %s" % (name, p))
    if problems:
        return 1
    print("%s: %d objects, %d references all created or a cluster's defaults, %d pod templates "
          "within their namespaces' Pod Security (%s)" % (
              name, len(objs), refs, pods,
              ", ".join("%s %s" % (n, l or "unlabelled") for n, l in sorted(levels.items())) or "no namespace"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
