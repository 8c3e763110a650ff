#!/bin/sh
# ctest-setup.sh OUT: what the sdk/typescript tests run on (the sdk/typescript-build fixture).
# Installs the devDependencies exactly as package-lock.json says (npm ci; only when the lock
# is newer than what is installed, as scripts/install-deps.sh does), then compiles src/ with
# the package's own tsconfig (`npm run build`, into OUT/dist instead of dist/ so the checkout
# stays clean) and puts package.json beside it: OUT is the package as `npm run build` makes it.
set -eu
out=$1
here=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	echo "skip: node and npm are not installed (scripts/install-deps.sh installs them)"
	exit 77
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 18 ]; then
	echo "skip: node $(node --version) is older than 18"
	exit 77
fi
cd "$here"
if [ -f node_modules/.package-lock.json ] && [ node_modules/.package-lock.json -nt package-lock.json ]; then
	echo "ctest-setup: node_modules up to date"
else
	npm ci --no-audit --no-fund --loglevel=error
	echo "ctest-setup: node_modules installed (npm ci)"
fi
rm -rf "$out"
mkdir -p "$out"
node_modules/.bin/tsc -p tsconfig.json --outDir "$out/dist"
cp package.json "$out/package.json"
echo "ctest-setup: built $out/dist ($(ls "$out/dist" | grep -c '\.js$') modules)"
