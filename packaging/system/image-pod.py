#!/usr/bin/env python3
"""What a container of a rendered install runs, for a test to run it the same way:

  kubectl kustomize DIR | image-pod.py KIND NAME CONTAINER

prints shell assignments: ARGS (its command line, `$(VAR)`s left for the
caller), RUN_AS (runAsUser, container's or pod's, else empty: the image's),
PRIVILEGED, READ_ONLY_ROOT and NO_NEW_PRIVS (true/false: privileged,
readOnlyRootFilesystem, allowPrivilegeEscalation: false), and MOUNTS, one
"MOUNTPATH PROPAGATION READONLY HOSTPATH-OR-KIND" per volume mount. Fails naming
what it did not find.
"""

import shlex
import sys

import yaml


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: image-pod.py KIND NAME CONTAINER")
    kind, name, container = sys.argv[1:]
    objs = [o for o in yaml.safe_load_all(sys.stdin) if o]
    obj = next((o for o in objs if o.get("kind") == kind and o["metadata"]["name"] == name), None)
    if obj is None:
        sys.exit("no %s %s in the rendering" % (kind, name))
    pod = obj["spec"]["template"]["spec"]
    every = (pod.get("initContainers") or []) + (pod.get("containers") or [])
    c = next((c for c in every if c["name"] == container), None)
    if c is None:
        sys.exit("%s %s has no container %s" % (kind, name, container))
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    csc, psc = c.get("securityContext") or {}, pod.get("securityContext") or {}
    user = csc.get("runAsUser", psc.get("runAsUser"))
    mounts = []
    for m in c.get("volumeMounts") or []:
        v = volumes[m["name"]]
        source = v["hostPath"]["path"] if "hostPath" in v else next(k for k in v if k != "name")
        mounts.append("%s %s %s %s" % (m["mountPath"], m.get("mountPropagation", "None"),
                                       "ro" if m.get("readOnly") else "rw", source))
    print("ARGS=(%s)" % " ".join(shlex.quote(a) for a in (c.get("command") or []) + (c.get("args") or [])))
    print("RUN_AS=%s" % ("" if user is None else user))
    flag = lambda b: "true" if b else "false"
    print("PRIVILEGED=%s" % flag(csc.get("privileged")))
    print("READ_ONLY_ROOT=%s" % flag(csc.get("readOnlyRootFilesystem")))
    print("NO_NEW_PRIVS=%s" % flag(csc.get("allowPrivilegeEscalation") is False))
    print("MOUNTS=(%s)" % " ".join(shlex.quote(m) for m in mounts))


if __name__ == "__main__":
    main()
