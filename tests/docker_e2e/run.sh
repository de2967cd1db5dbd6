#!/usr/bin/env bash
# `make test-docker`: bring up a private Docker engine (engine.sh up), run the command given as
# arguments (the real-engine tests) against it, and always tear the engine down (engine.sh down),
# restoring the firewall rules and ip_forward. Exit status: the tests', or the tear-down's when
# the tests passed but the machine could not be restored. Never a silent pass: if the engine
# cannot be brought up, this fails.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

down() {
	if ! bash "$here/engine.sh" down; then
		echo "test-docker: the engine tear-down failed (see above)" >&2
		return 1
	fi
}

if ! bash "$here/engine.sh" up; then
	echo "test-docker: the private Docker engine could not be brought up (see above)" >&2
	down
	exit 1
fi
# shellcheck disable=SC1090
eval "$(bash "$here/engine.sh" env)"
"$@"
status=$?
down || { [ "$status" -eq 0 ] && status=1; }
exit "$status"
