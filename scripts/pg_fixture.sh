#!/bin/sh
# A throwaway PostgreSQL 15 server for the tests: initdb into a temporary directory as an
# unprivileged user (nobody, when started as root: the server refuses to run as root),
# listening only on a unix socket in that directory (listen_addresses=''), trust
# authentication for that socket only.
#
#   scripts/pg_fixture.sh start WATCH_PID   prints the directory (line 1) and a connection URI
#                                           for its "postgres" database (line 2); the server
#                                           stops by itself when process WATCH_PID is gone
#                                           (a test that crashed before its teardown)
#   scripts/pg_fixture.sh stop DIR          stops the server and deletes DIR
#   scripts/pg_fixture.sh pgstop DIR        stops the server, keeps DIR (a test of a lost
#                                           server)
# Fails (exit 1, one line on stderr) when PostgreSQL 15 is not installed: never a skip.
set -eu
bin=${HARVEST_PG_BIN:-/usr/lib/postgresql/15/bin}
[ -x "$bin/initdb" ] && [ -x "$bin/pg_ctl" ] || {
	echo "pg_fixture: $bin/initdb not found: install postgresql-15 (scripts/deps.sh)" >&2
	exit 1
}
as_user() {
	if [ "$(id -u)" -eq 0 ]; then
		setpriv --reuid=nobody --regid=nogroup --clear-groups --reset-env -- "$@"
	else
		"$@"
	fi
}
case ${1:-} in
start)
	watch=${2:?usage: pg_fixture.sh start WATCH_PID}
	dir=$(mktemp -d /tmp/hvpg.XXXXXX)
	chmod 755 "$dir"
	[ "$(id -u)" -ne 0 ] || chown nobody:nogroup "$dir"
	as_user "$bin/initdb" -D "$dir/data" -A trust -U harvest --no-sync -E UTF8 \
		>"$dir/initdb.log" 2>&1 || {
		echo "pg_fixture: initdb failed: $(tail -n 3 "$dir/initdb.log" | tr '\n' ' ')" >&2
		exit 1
	}
	as_user "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
		-o "-c listen_addresses='' -c unix_socket_directories='$dir' -c fsync=off \
-c max_connections=200 -c shared_buffers=32MB" start >/dev/null 2>&1 || {
		echo "pg_fixture: the server did not start: $(tail -n 3 "$dir/server.log" | tr '\n' ' ')" >&2
		exit 1
	}
	# The watchdog: stops the server when the test process is gone, however it ended.
	(
		trap '' HUP INT
		while kill -0 "$watch" 2>/dev/null; do sleep 1; done
		as_user "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
		rm -rf "$dir"
	) </dev/null >/dev/null 2>&1 &
	echo "$dir"
	echo "postgresql:///postgres?host=$dir&user=harvest"
	;;
stop | pgstop)
	dir=${2:?usage: pg_fixture.sh stop DIR}
	[ -d "$dir/data" ] && as_user "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
	[ "$1" = pgstop ] || rm -rf "$dir"
	;;
*)
	echo "usage: pg_fixture.sh start WATCH_PID | stop DIR | pgstop DIR" >&2
	exit 2
	;;
esac
