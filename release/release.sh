#!/usr/bin/env bash
# Tags every module of the repository for one release, after checking that
# each published module resolves as a dependent would fetch it. Dry run by
# default: prints the tags and runs the check, creates nothing.
#
#	bash release/release.sh                 # dry run at the version the go.mod files require
#	bash release/release.sh v0.1.0          # dry run for v0.1.0
#	bash release/release.sh -tag v0.1.0     # check, then create the tags (local; push yourself)
#	bash release/release.sh -bump v0.2.0    # point every nested module at v0.2.0 (then commit)
#
# The check needs no network: the module proxy it serves from is a folder
# built from the commit to tag, and third-party modules come from the local
# module cache. See release/README.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
GOWORK=off go run . -repo "$here/.." "$@"
