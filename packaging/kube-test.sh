#!/usr/bin/env bash
# Every Kubernetes install (packaging/kubernetes and each overlays/*) rendered by
# `kubectl kustomize` with every kubectl at hand: the machine's, and Debian 12's
# kubernetes-client (kubectl 1.20, whose kustomize is the oldest the manifests
# keep to: `bases:` for directories, generated objects of one name apart),
# unpacked from its package when the machine's kubectl is another. Each
# rendering must validate against the API's schemas (kubernetes-validate) and
# pass packaging/kube-check.py: nothing named that nothing creates, pods within
# their namespaces' Pod Security, the image set. The check is shown to fail too:
# on a rendering without its Secret, and with a node pod that may escalate.
#   packaging/kube-test.sh WORKDIR     Prints "kube: N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
work=${1:?usage: packaging/kube-test.sh WORKDIR}
mkdir -p "$work"
passed=0; failed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }
check() { local what=$1; shift; if "$@" >"$work/check.log" 2>&1; then ok "$what"; else bad "$what"; sed 's/^/     /' "$work/check.log" | tail -20; fi; }

# Debian 12's kubectl, unpacked once into target/tools (not installed: a
# machine's own kubectl package owns /usr/bin/kubectl).
kubectls=("$(command -v kubectl)")
if ! kubectl version --client 2>/dev/null | grep -q 'GitVersion:"v1.20'; then
  old=target/tools/kubernetes-client/usr/bin/kubectl
  if [ ! -x "$old" ]; then
    rm -rf target/tools/kubernetes-client "$work/deb"; mkdir -p "$work/deb" target/tools
    (cd "$work/deb" && apt-get download kubernetes-client >/dev/null 2>&1 ||
      { apt-get update -qq && apt-get download kubernetes-client >/dev/null; }) &&
      dpkg-deb -x "$work"/deb/kubernetes-client_*.deb target/tools/kubernetes-client
  fi
  if [ -x "$old" ]; then kubectls+=("$old"); else bad "Debian's kubernetes-client (kubectl 1.20) unpacked"; fi
fi

# The install as a user has it once the key is written; the key of this run.
cp -r packaging/kubernetes "$work/tree"
rm -f "$work/tree/base/cluster-secret-key"
for k in "${kubectls[@]}"; do
  v=$("$k" version --client 2>/dev/null | grep -o 'v1\.[0-9]*\.[0-9]*' | head -1)
  check "kubectl $v kustomize stops while the cluster key is not written, naming its file" bash -c \
    "! '$k' kustomize '$work/tree' >/dev/null 2>'$work/nokey.log' && grep -q cluster-secret-key '$work/nokey.log'"
done
head -c 30 /dev/urandom | base64 | tr -d '\n' >"$work/tree/base/cluster-secret-key"

installs=(.)
for d in packaging/kubernetes/overlays/*/; do [ -d "$d" ] && installs+=("overlays/$(basename "$d")"); done
for k in "${kubectls[@]}"; do
  v=$("$k" version --client 2>/dev/null | grep -o 'v1\.[0-9]*\.[0-9]*' | head -1)
  for i in "${installs[@]}"; do
    name=packaging/kubernetes/${i#./}; name=${name%/.}
    out=$work/render-$v-${i//\//-}.yaml
    if ! "$k" kustomize "$work/tree/$i" >"$out" 2>"$work/kustomize.log"; then
      bad "kubectl $v kustomize $name"; sed 's/^/     /' "$work/kustomize.log"; continue
    fi
    ok "kubectl $v kustomize $name: $(grep -c '^kind:' "$out") objects"
    check "$name ($v) validates against the API's schemas" kubernetes-validate --strict --quiet "$out"
    check "$name ($v): $(python3 packaging/kube-check.py "$name" <"$out" 2>&1 | tail -1 | sed "s|^$name: ||")" \
      python3 packaging/kube-check.py "$name" <"$out"
  done
done

# The check fails where a fresh cluster would: the default install's rendering
# without its Secret objects, and with a node container allowed to escalate.
base=$(ls "$work"/render-*-..yaml | head -1)
python3 -c '
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] != "Secret"]
yaml.safe_dump_all(docs, open(sys.argv[2], "w"))' "$base" "$work/nosecret.yaml"
check "kube-check.py fails on a rendering without the cluster Secret, naming it and who needs it" bash -c "
  ! python3 packaging/kube-check.py nosecret <'$work/nosecret.yaml' >'$work/nosecret.out'; cat '$work/nosecret.out'
  grep -q 'Secret shoal/shoal-cluster, which nothing creates, is named by StatefulSet shoal/shoal-node' '$work/nosecret.out'"
sed 's/allowPrivilegeEscalation: false/allowPrivilegeEscalation: true/' "$base" >"$work/escalate.yaml"
check "kube-check.py fails on a node pod that may escalate in the restricted namespace" bash -c "
  ! python3 packaging/kube-check.py escalate <'$work/escalate.yaml' >'$work/escalate.out'; cat '$work/escalate.out'
  grep -q \"StatefulSet shoal/shoal-node fails Pod Security 'restricted'.*allowPrivilegeEscalation\" '$work/escalate.out'"
check "kube-check.py refuses what is not a rendering, saying so" bash -c "
  ! echo 'kind: [' | python3 packaging/kube-check.py bad 2>'$work/bad.out' && grep -q 'bad: the rendering is not YAML' '$work/bad.out' &&
  ! python3 packaging/kube-check.py empty </dev/null 2>'$work/empty.out' && grep -q 'empty: the rendering holds no object' '$work/empty.out'"
echo "kube: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
